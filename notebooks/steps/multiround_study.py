"""Fig. 2 analogue on a ``World``: the PE loop, MAUVE per round for the DP run and the random-retention control,
the gain with its interval, and the frozen-bank and adaptive audits. Source: §3, Fig. 2, Alg. A.1, App. D, Eq. 36.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from pe_kit.audit.adaptive import _adaptive_audit, side_by_side, transcript_tree
from pe_kit.audit.composed import _composed_audit, round_problems
from pe_kit.settings import AuditConfig, MechanismConfig
from pe_kit.pe.multiround import PEConfig, Population, Transcript, run_pe
from pe_kit.progress import progress
from pe_kit.text.generators.base import generator_identity

#: The two arms of the utility comparison: retention by the DP histogram, and uniformly at random (σ → ∞).
ARMS = ("dp", "control")


@dataclass(frozen=True)
class MultiroundResult:
    """``transcripts`` ((arm, pe_seed) → ``Transcript``); ``rows`` per (arm, pe_seed, round): MAUVE, bank make-up,
    settings; ``gain`` per round (``paired_gain``); ``audit`` per prefix t = 1..T of the first DP transcript:
    ε_theory, frozen-bank and adaptive ε_lower, the share of H1 trials whose retained set the canary changed."""

    transcripts: dict
    rows: list
    gain: list
    audit: list


def multiround_study(world, design, generator, mechanism: MechanismConfig, pe: PEConfig, audit: AuditConfig,
                     rng: np.random.Generator, *, pe_seeds: Sequence[int] = (0,), control: bool = True,
                     adaptive: bool = True, adaptive_trials: int | None = None, max_banks: int = 64,
                     reference_split: str = "calibration", mauve_seeds=(0, 1, 2, 3, 4),
                     mauve_samples: int | None = 2000, level: float = 0.95, checkpoint_dir=None,
                     bank_texts: Sequence[str] | None = None,
                     bank_embeddings: np.ndarray | None = None) -> MultiroundResult:
    """Fig. 2 analogue: DP run vs random-retention control (MAUVE per round) and the audits of the DP run.

    Per PE seed, ``run_pe`` retains by the DP histogram and at random (σ → ∞) from the same draws on ``world.bank``
    plus the design's probes; MAUVE of each bank's non-probe texts against ``reference_split`` (``calibration`` or
    ``aux``). Then ``paired_gain`` per round, and on the first DP transcript ``_composed_audit`` (frozen banks) and
    ``_adaptive_audit`` (Eq. 36) of the design's canary. ``pe.retention`` is set per arm; ``pe_seeds`` ≥ 2 for an
    interval; ``adaptive_trials`` None = ``audit.trials``; ``mauve_samples`` None = all.

    Raises ValueError for an unknown reference split, no PE seeds, or inconsistent inputs."""
    from pe_kit.report.mauve import paired_gain

    pe_seeds = _checked_seeds(reference_split, pe_seeds, bank_texts, bank_embeddings)
    loop_rng, mauve_rng, audit_rng = rng.spawn(3)
    loop_entropy = int(loop_rng.integers(2**62))
    mauve_entropy = int(mauve_rng.integers(2**62))
    test = Population.from_world(world, "test")
    if bank_texts is None:
        bank_texts, bank_embeddings = world.bank_texts, world.bank
    ref = world.records[reference_split]["emb"]
    if mauve_samples is not None and ref.shape[0] > mauve_samples:
        ref = ref[np.sort(mauve_rng.choice(ref.shape[0], size=mauve_samples, replace=False))]
    initial = set(bank_texts)
    settings = _settings(world, design, generator, mechanism, pe, audit, reference_split, len(pe_seeds))
    arms = ARMS if control else ARMS[:1]
    transcripts: dict = {}
    rows: list[dict] = []
    scores: dict = {}
    for s in pe_seeds:
        for arm in arms:
            cfg = replace(pe, retention="histogram" if arm == "dp" else "random")
            t0 = time.perf_counter()
            tr = run_pe(bank_texts, bank_embeddings, test, generator, mechanism, cfg,
                        np.random.default_rng([loop_entropy, s]), design=design, encoder=world.encoder,
                        checkpoint_dir=checkpoint_dir)
            transcripts[arm, s] = tr
            head = {"retention": cfg.retention, "transcript_key": tr.key, "seconds_pe": time.perf_counter() - t0}
            rows += _mauve_rows(tr, arm, s, ref, mauve_seeds, mauve_samples, mauve_entropy, initial, scores, head,
                                settings)
    gain = []
    if control:
        for t in range(pe.rounds + 1):
            g = paired_gain(np.array([scores["dp", s, t] for s in pe_seeds]),
                            np.array([scores["control", s, t] for s in pe_seeds]), level)
            gain.append({"round": t, **g, "mauve_seeds": len(mauve_seeds), **settings})
    t0 = time.perf_counter()
    audit_rows = _audits(world, design, generator, mechanism, pe, audit, audit_rng, transcripts["dp", pe_seeds[0]],
                         test, adaptive, adaptive_trials, max_banks, settings)
    for r in audit_rows:
        r["seconds_audits"] = time.perf_counter() - t0
    return MultiroundResult(transcripts, rows, gain, audit_rows)


def _checked_seeds(reference_split: str, pe_seeds: Sequence[int], bank_texts, bank_embeddings) -> list[int]:
    """``pe_seeds`` as ints, after checking the arguments ``multiround_study`` refuses (ValueError naming each)."""
    if reference_split not in ("calibration", "aux"):
        raise ValueError(f"reference_split={reference_split!r} must be 'calibration' or 'aux' (held out of the loop)")
    pe_seeds = [int(s) for s in pe_seeds]
    if not pe_seeds or len(set(pe_seeds)) != len(pe_seeds):
        raise ValueError(f"pe_seeds={pe_seeds!r} must be ≥ 1 distinct ints (≥ 2 for a confidence interval)")
    if (bank_texts is None) != (bank_embeddings is None):
        raise ValueError("pass bank_texts and bank_embeddings together (or neither, for the world's bank)")
    return pe_seeds


def _settings(world, design, generator, mechanism, pe, audit, reference_split: str, n_pe_seeds: int) -> dict:
    """The columns every row of the study carries: mechanism, PE, audit and study settings, canary and generator."""
    return {**{f"mech_{k}": v for k, v in mechanism.as_dict().items()},
            **{f"pe_{k}": v for k, v in pe.as_dict().items() if k != "retention"},
            **{f"audit_{k}": v for k, v in audit.as_dict().items()}, "gamma": audit.gamma,
            **{f"study_{k}": v for k, v in world.config.as_dict().items()},
            "variant": design.variant, "canary_id": design.canary_id,
            "generator": generator_identity(generator)["name"], "reference_split": reference_split,
            "n_pe_seeds": n_pe_seeds, **dict(world.truncation)}


def _mauve_rows(tr: Transcript, arm: str, s: int, ref: np.ndarray, mauve_seeds, mauve_samples, mauve_entropy: int,
                initial: set, scores: dict, head: dict, settings: dict) -> list[dict]:
    """One row per bank of transcript ``tr`` (arm ``arm``, PE seed ``s``): MAUVE of its non-probe candidates against
    ``ref`` (seeded by [mauve_entropy, s, round]; the scores also go to ``scores[arm, s, round]``), its make-up,
    ``head`` and ``settings``."""
    from pe_kit.report.mauve import mauve_score

    rows, t0 = [], time.perf_counter()
    for t, bank in enumerate(progress(tr.banks, desc=f"MAUVE per bank ({arm}, PE seed {s})", unit="bank")):
        cand = bank.candidate_mask()
        m = mauve_score(bank.embeddings[cand], ref, seeds=mauve_seeds, max_samples=mauve_samples,
                        rng=np.random.default_rng([mauve_entropy, s, t]))
        scores[arm, s, t] = m.scores
        texts = [x for x, c in zip(bank.texts, cand) if c]
        rows.append({"arm": arm, "pe_seed": s, "round": t, "releases": t, "mauve_mean": m.mean,
                     "mauve_sd": m.sd, "mauve_scores": list(m.scores), "mauve_buckets": m.num_buckets,
                     "mauve_distinct_p": m.distinct_p, "mauve_distinct_q": m.distinct_q,
                     "mauve_n_p": m.n_p, "mauve_n_q": m.n_q, "bank_size": bank.size,
                     "n_probes": int(bank.probe_positions.size),
                     "frac_initial_bank": float(np.mean([x in initial for x in texts])),
                     "participants": tr.rounds[t - 1].participants if t > 0 else 0,
                     **head, "seconds_mauve": time.perf_counter() - t0, **settings})
    return rows


def _audits(world, design, generator, mechanism, pe, audit, rng, transcript: Transcript, test, adaptive: bool,
            adaptive_trials, max_banks: int, settings: dict) -> list[dict]:
    """Frozen-bank (``_composed_audit``) and adaptive (``_adaptive_audit``) ε_lower per prefix, side by side."""
    canary = Population(design.canary_embeddings, np.zeros(len(design.canary_embeddings), np.int64), 1, "canary")
    aux, cal = Population.from_world(world, "aux"), Population.from_world(world, "calibration")
    frozen_rng, adaptive_rng = rng.spawn(2)
    problems = round_problems(transcript, canary, aux, cal, test, mechanism, audit, frozen_rng)
    frozen = _composed_audit(problems, mechanism, audit, frozen_rng)
    if not adaptive:
        return [{**r, "epsilon_lower_frozen": r["epsilon_lower"], **settings} for r in frozen]
    tree = transcript_tree(transcript, test, canary, generator, mechanism, replace(pe, retention="histogram"),
                           encoder=world.encoder, max_banks=max_banks)
    a_audit = audit if adaptive_trials is None else replace(audit, trials=adaptive_trials)
    adapt = _adaptive_audit(tree, canary, aux, cal, test, mechanism, a_audit, adaptive_rng)
    both = side_by_side(frozen, adapt)
    return [{**f, **b, "adaptive_trials": a_audit.trials, "mu_eff_adaptive": a["mu_eff_mean"], **settings}
            for f, b, a in zip(frozen, both, adapt)]
