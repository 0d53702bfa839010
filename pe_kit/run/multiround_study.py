"""Fig. 2 analogue on a ``World``: the PE loop over the test users, MAUVE per round, composed ε per prefix.

Source: "Canaries in the Bank" §3 "Multi-round PE with ICL", Fig. 2, App. D "Multi-round accounting".
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from pe_kit.audit.composed import composed_audit, round_problems
from pe_kit.config import AuditConfig, MechanismConfig
from pe_kit.pe.multiround import PEConfig, Population, Transcript, _generator_id, run_pe
from pe_kit.progress import progress


# ---------------------------------------------------------------------------------------------- study
def multiround_study(world, design, generator, mechanism: MechanismConfig, pe: PEConfig, audit: AuditConfig,
                     rng: np.random.Generator, *, reference_split: str = "calibration", mauve_seeds=(0, 1, 2, 3, 4),
                     mauve_samples: int | None = 2000, checkpoint_dir=None, bank_texts: Sequence[str] | None = None,
                     bank_embeddings: np.ndarray | None = None) -> tuple[Transcript, list[dict]]:
    """Fig. 2 analogue on a ``World``: PE rounds over the test users, MAUVE per round, composed ε per prefix.

    Steps: ``run_pe`` on ``world.bank`` (+ the design's probes) with the ``test`` split as the private
    population; MAUVE (``pe_kit.report.mauve.mauve_score``, mean ± sd over ``mauve_seeds``) between each
    bank's non-probe candidates S^(t), t = 0..T, and the held-out records of ``reference_split`` (never
    seen by the loop); ``round_problems`` + ``composed_audit`` for prefixes 1..T.

    Args:
        world: ``pe_kit.run.study.World``. design: ``ProbeDesign`` (its canary is audited; its probes, if
            any, are kept in every bank). generator: variation generator.
        mechanism, pe, audit: settings (paper Fig. 2: T=6, q=0.1, σ=1.1088, δ=1e-5).
        rng: randomness (one child per stage, drawn in order: loop, MAUVE subsamples, audit).
        reference_split: split whose records are the MAUVE reference Q (``calibration`` or ``aux``).
        mauve_seeds: k-means seeds; mauve_samples: per-side subsample cap (None = all).
        checkpoint_dir: as ``run_pe``.
        bank_texts, bank_embeddings: initial bank S^(0) before probes (default ``world.bank_texts`` /
            ``world.bank``); the design's probe positions must lie inside it.

    Returns:
        (transcript, rows): one tidy row per round t = 0..T with ``round``, ``releases`` (= t),
        ``mauve_mean``, ``mauve_sd``, ``mauve_scores``, ``epsilon_theory`` / ``epsilon_lower`` (0 at t = 0),
        the audit columns of ``composed_audit``, the bank make-up and every setting.

    Raises:
        ValueError: for an unknown reference split or inconsistent inputs.
    """
    from pe_kit.report.mauve import mauve_score

    if reference_split not in ("calibration", "aux"):
        raise ValueError(f"reference_split={reference_split!r} must be 'calibration' or 'aux' (held out of the loop)")
    loop_rng, mauve_rng, audit_rng = rng.spawn(3)
    test = Population.from_world(world, "test")
    if (bank_texts is None) != (bank_embeddings is None):
        raise ValueError("pass bank_texts and bank_embeddings together (or neither, for the world's bank)")
    if bank_texts is None:
        bank_texts, bank_embeddings = world.bank_texts, world.bank
    transcript = run_pe(bank_texts, bank_embeddings, test, generator, mechanism, pe, loop_rng, design=design,
                        encoder=world.encoder, checkpoint_dir=checkpoint_dir)
    canary = Population(design.canary_embeddings, np.zeros(len(design.canary_embeddings), np.int64), 1, "canary")
    problems = round_problems(transcript, canary, Population.from_world(world, "aux"),
                              Population.from_world(world, "calibration"), test, mechanism, audit, audit_rng)
    audit_rows = composed_audit(problems, mechanism, audit, audit_rng)
    ref = world.records[reference_split]["emb"]
    if mauve_samples is not None and ref.shape[0] > mauve_samples:
        ref = ref[np.sort(mauve_rng.choice(ref.shape[0], size=mauve_samples, replace=False))]
    initial = set(bank_texts)
    settings = {**{f"mech_{k}": v for k, v in mechanism.as_dict().items()},
                **{f"pe_{k}": v for k, v in pe.as_dict().items()},
                **{f"audit_{k}": v for k, v in audit.as_dict().items()}, "gamma": audit.gamma,
                **{f"study_{k}": v for k, v in world.config.as_dict().items()},
                "variant": design.variant, "canary_id": design.canary_id, "generator": _generator_id(generator)["name"],
                "reference_split": reference_split, "transcript_key": transcript.key, **dict(world.truncation)}
    rows = []
    for t, bank in enumerate(progress(transcript.banks, desc="MAUVE per bank", unit="bank")):
        cand = bank.candidate_mask()
        m = mauve_score(bank.embeddings[cand], ref, seeds=mauve_seeds, max_samples=mauve_samples,
                        rng=np.random.default_rng([int(mauve_rng.integers(2**31)), t]))
        texts = [x for x, c in zip(bank.texts, cand) if c]
        row = {"round": t, "releases": t, "mauve_mean": m.mean, "mauve_sd": m.sd, "mauve_scores": list(m.scores),
               "mauve_buckets": m.num_buckets, "mauve_n_p": m.n_p, "mauve_n_q": m.n_q,
               "bank_size": bank.size, "n_probes": int(bank.probe_positions.size),
               "frac_initial_bank": float(np.mean([x in initial for x in texts])),
               "participants": transcript.rounds[t - 1].participants if t > 0 else 0,
               "epsilon_theory": 0.0, "epsilon_lower": 0.0}
        if t > 0:
            row.update(audit_rows[t - 1])
        rows.append({**row, **settings})
    return transcript, rows
