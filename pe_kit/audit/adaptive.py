"""The adaptive multi-round audit (Eq. 36): the canary's sampled votes enter Y^(t), so they can change the
retained set and every later bank; per-round LLRs are computed on each trial's realised bank and summed.

Source: "Canaries in the Bank", App. A (Alg. A.1: S^(t+1) = Top_k̃(Y^(t)) ∪ G(F^(t))), App. E.8 Eq. 36
(log p1(y^{1:T})/p0(y^{1:T}) = Σ_t log p1(y^(t) | y^(<t)) / p0(y^(t) | y^(<t)): per-round mixture scores
may be summed when each is the conditional LLR given the realised earlier transcript), App. D
"Multi-round accounting". The frozen-bank approximation it is compared with is ``pe_kit.audit.composed``.

Construction (documented design). A PE run (``pe_kit.pe.multiround.run_pe``) fixes an entropy; round t
draws the background participation and the DP noise from ``default_rng([entropy, t])`` and then the
generator's prompts and seeds (``pe_round``). Under H1 the canary is one more eligible user: in round t
it is sampled with J_t ~ Bernoulli(q) and, when sampled, its clipped votes v(S^(t)) are added to Y^(t)
before the top-k̃ retention (``pe_round(extra_votes=v)``). With the PE run's background and noise held
fixed (coupled across trials), the whole transcript is a deterministic function of the canary's
participation pattern J_1..J_T, so at most 2^T − 1 transcripts exist; in practice far fewer, since a
sampled canary changes retention only when one of its votes lands on a candidate near the top-k̃
boundary (a nonce canary, whose votes all land on probes, never does: probes are never candidates).
``transcript_tree`` builds each distinct bank once (generation and embeddings are cached by content, so
branches that retain the same set reuse them). ``_adaptive_audit`` then runs trials: per trial and
round, J_t is drawn, the trial moves down the tree, and the round's score is the single-release mixture
LLR (Eqs. 14, 22) on *that trial's* realised bank S^(t) — with fresh background participation and noise
on the inspected coordinates, as in the single-release audit (``trials.simulate_scores``) — summed over
rounds (Eq. 36). Under H0 (J ≡ 0) every trial follows the canary-free transcript.

What is approximated: (i) retention is decided on the PE run's own background and noise (one coupled
draw for all trials; fresh draws per trial would make every trial's retained set, hence every bank,
distinct, and need T·g generations per trial), while the inspected coordinates get fresh draws per trial;
(ii) each ℓ_t inherits the Gaussian approximation of Eq. 14 with aux-estimated moments on the trial's
bank. The frozen-bank audit is the special case where every trial follows the canary-free transcript;
the fraction of H1 trials whose retained set the canary changed says how far apart the two can be.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from pe_kit.audit.accounting import epsilon_theory_prefixes
from pe_kit.audit.composed import RoundProblem, _prefix_audit, bank_problem
from pe_kit.audit.moments import mixture_llr
from pe_kit.audit.trials import simulate_scores
from pe_kit.cache import content_hash
from pe_kit.settings import AuditConfig, MechanismConfig
from pe_kit.pe.multiround import FrozenBank, PEConfig, Population, Transcript, next_bank, pe_round, release_round
from pe_kit.text.variation import build_feedback

__all__ = ["TreeNode", "transcript_tree", "side_by_side"]


@dataclass
class TreeNode:
    """One distinct bank S^(t) reachable by some canary participation pattern.

    Attributes:
        round: t. bank: the ``FrozenBank``. seen: frozenset of every text of S^(0..t).
        reference: True when the bank is the canary-free transcript's S^(t).
        next_absent, next_present: index (into the next round's node list) of S^(t+1) when the canary is
            not / is sampled in round t (equal when its votes change nothing the generator sees); −1 at t = T−1
            (S^(T) is not released, so it is not built; ``changes_retention`` is still set there).
        changes_retention: True when the canary's votes, if sampled in round t, change the retained *set*.
        problem: the ``RoundProblem`` of this bank (filled by ``_adaptive_audit``).
    """

    round: int
    bank: FrozenBank
    seen: frozenset
    reference: bool
    next_absent: int = -1
    next_present: int = -1
    changes_retention: bool = False
    problem: RoundProblem | None = field(default=None, repr=False)


def _bank_key(bank: FrozenBank, seen: frozenset) -> str:
    return content_hash(list(bank.texts), bank.probe_positions.tolist(), sorted(seen))


def transcript_tree(transcript: Transcript, private: Population, canary: Population, generator,
                    mechanism: MechanismConfig, config: PEConfig, *, encoder=None,
                    max_banks: int = 64) -> list[list[TreeNode]]:
    """Every bank the adaptive process can reach under H1, round by round (see the module docstring).

    Args:
        transcript: the canary-free ``run_pe`` result (its entropy fixes the background and noise draws).
        private: the voting users of that run. canary: one user (``n_users == 1``).
        generator, encoder, mechanism, config: those of the run (the same objects or equal ones).
        max_banks: cap on the distinct banks built over all rounds (each costs g generations).

    Returns:
        list of T lists of ``TreeNode``; ``tree[0] == [root]``; node 0 of every round is the canary-free bank.

    Raises:
        ValueError: if the canary is not one user, the transcript has no rounds, or more than ``max_banks``
        banks are needed (raise it, or lower ``rounds``).
    """
    if canary.n_users != 1:
        raise ValueError(f"canary must be one user; got n_users={canary.n_users}")
    if not transcript.rounds:
        raise ValueError("transcript has no rounds")
    T = len(transcript.rounds)
    root = transcript.rounds[0].bank
    tree: list[list[TreeNode]] = [[TreeNode(0, root, frozenset(root.texts), True)]]
    built = 1
    for t in range(T):
        nxt: list[TreeNode] = []
        index: dict[str, int] = {}

        def child(bank: FrozenBank, seen: frozenset, reference: bool) -> int:
            nonlocal built
            key = _bank_key(bank, seen)
            if key not in index:
                if not reference:
                    built += 1
                    if built > max_banks:
                        raise ValueError(f"the canary's votes lead to more than max_banks={max_banks} distinct banks "
                                         f"by round {t + 1}; raise max_banks or lower rounds")
                index[key] = len(nxt)
                nxt.append(TreeNode(t + 1, bank, seen, reference))
            return index[key]

        for node in tree[t]:
            ref_rec = transcript.rounds[t]
            on_ref = node.reference and ref_rec.bank.texts == node.bank.texts
            y0 = (ref_rec.histogram if on_ref else
                  release_round(node.bank, private, mechanism, np.random.default_rng([transcript.entropy, t]))[0])
            v = np.asarray(canary.contributions(node.bank, mechanism).todense(), dtype=np.float64).ravel()
            retain = config.retain_count(node.bank.size, node.bank.probe_positions.size)
            same = True
            if config.retention == "histogram":  # random retention ignores Y: the canary changes nothing
                ret0, fb0 = build_feedback(node.bank.texts, y0, node.bank.probe_positions, retain, config.n_negatives)
                ret1, fb1 = build_feedback(node.bank.texts, y0 + v, node.bank.probe_positions, retain,
                                           config.n_negatives)
                uses_negatives = not getattr(generator, "raw_text_input", False) and config.icl_negatives > 0
                same = fb0.positives == fb1.positives and (not uses_negatives or fb0.negatives == fb1.negatives)
                node.changes_retention = set(ret1.tolist()) != set(ret0.tolist())
            if t + 1 == T:  # S^(T) is not released again: no bank to build
                continue
            rec0 = ref_rec if on_ref else pe_round(node.bank, private, generator, mechanism, config,
                                                   transcript.entropy, t, node.seen, encoder=encoder)
            b0 = next_bank(node.bank, rec0.retained, rec0.new_texts, rec0.new_embeddings)
            node.next_absent = child(b0, node.seen | frozenset(rec0.new_texts), node.reference)
            if same:
                node.next_present = node.next_absent
                continue
            rec1 = pe_round(node.bank, private, generator, mechanism, config, transcript.entropy, t, node.seen,
                            encoder=encoder, extra_votes=v)
            b1 = next_bank(node.bank, rec1.retained, rec1.new_texts, rec1.new_embeddings)
            node.next_present = child(b1, node.seen | frozenset(rec1.new_texts), False)
        if t + 1 < T:
            tree.append(nxt)
    return tree


def _adaptive_audit(tree: list[list[TreeNode]], canary: Population, aux: Population, calibration: Population,
                   test: Population, mechanism: MechanismConfig, audit: AuditConfig, rng: np.random.Generator,
                   chunk_size: int = 1 << 20) -> list[dict]:
    """ε_lower per prefix t = 1..T of the adaptive transcript (Eq. 36), with ε_theory and how often the canary
    changed the retained set.

    Per split (calibration, test) and hypothesis, ``audit.trials`` trials: J_{i,t} ~ Bernoulli(q) under H1
    (≡ 0 under H0); trial i's bank in round t is the tree node reached by J_{i,<t}; its round score is
    ℓ_mix,t = log[(1−q) + q e^{ℓ_t}] with ℓ_t simulated on that node's ``RoundProblem`` (background
    participation and noise fresh per trial, the canary's shift added when J_{i,t} = 1). Scores are summed
    over rounds; each prefix is calibrated and bounded as in ``_composed_audit`` (``_prefix_audit``).

    Args:
        tree: ``transcript_tree`` output. canary, aux, calibration, test: populations (equal-size
            calibration and test splits, or a resizing draw is made from ``rng`` as in ``round_problems``).
        mechanism, audit: settings. rng: the only source of randomness. chunk_size: as ``simulate_scores``.

    Returns:
        list of T dicts: ``releases``, ``epsilon_lower``, ``epsilon_theory``, ``frac_retention_changed``
        (share of H1 test-split trials in which the sampled canary changed the retained set in some round
        ≤ t), ``frac_bank_changed`` (share whose bank S^(t) differs from the canary-free one), ``n_banks``
        (distinct banks in round t), ``mu_eff_mean`` (μ_eff over round t's banks, weighted by H1 trials),
        ``trials``, ``seconds`` and the counts of ``_prefix_audit``.

    Raises:
        ValueError: on an empty tree or σ = 0.
    """
    if not tree or not tree[0]:
        raise ValueError("tree is empty: build it with transcript_tree")
    if mechanism.noise_multiplier <= 0:
        raise ValueError("noise_multiplier must be > 0 for ε_theory; use σ > 0")
    T, q, n = len(tree), mechanism.sample_rate, audit.trials
    resize = (rng.integers(0, calibration.n_users, size=test.n_users)
              if calibration.n_users != test.n_users else None)
    for nodes in tree:
        for node in nodes:
            if node.problem is None:
                node.problem = bank_problem(node.bank, node.round, canary, aux, calibration, test, mechanism, audit,
                                            resize)
    eps_theory = epsilon_theory_prefixes(mechanism.noise_multiplier, q, audit.delta, T)
    t0 = time.perf_counter()
    prefix: dict[tuple[str, int], np.ndarray] = {}
    stats: dict[str, np.ndarray] = {}
    for split in ("calibration", "test"):
        for h in (0, 1):
            node = np.zeros(n, dtype=np.int64)
            score = np.zeros(n)
            changed = np.zeros(n, dtype=bool)
            out = np.empty((T, n))
            ch_t, off_t, mu_t = np.empty((T, n), bool), np.empty((T, n), bool), np.zeros(T)
            for t, nodes in enumerate(tree):
                joined = (rng.random(n) < q) if h == 1 else np.zeros(n, dtype=bool)
                off_t[t] = ~np.array([nd.reference for nd in nodes])[node]
                for k in np.unique(node):
                    idx = np.flatnonzero(node == k)
                    prob = getattr(nodes[k].problem, split)
                    ell = simulate_scores(prob, 0, idx.size, rng, chunk_size=chunk_size) + joined[idx] * prob.canary_shift
                    score[idx] += mixture_llr(ell, q)
                    mu_t[t] += idx.size * nodes[k].problem.mu_eff / n
                changes = np.array([nd.changes_retention for nd in nodes])[node]
                changed |= joined & changes
                ch_t[t] = changed
                out[t] = score
                if t + 1 < T:
                    table = np.array([[nd.next_absent, nd.next_present] for nd in nodes], dtype=np.int64)
                    node = table[node, joined.astype(np.int64)]
            prefix[split, h] = out
            if split == "test" and h == 1:
                stats = {"changed": ch_t.mean(axis=1), "off": off_t.mean(axis=1), "mu": mu_t}
    rows = []
    for t in range(T):
        rows.append({"releases": t + 1, "epsilon_theory": eps_theory[t],
                     "frac_retention_changed": float(stats["changed"][t]), "frac_bank_changed": float(stats["off"][t]),
                     "n_banks": len(tree[t]), "mu_eff_mean": float(stats["mu"][t]), "trials": n,
                     "seconds": time.perf_counter() - t0,
                     **_prefix_audit(prefix["calibration", 0][t], prefix["calibration", 1][t], prefix["test", 0][t],
                                    prefix["test", 1][t], audit).row})
    return rows


def side_by_side(frozen_rows: Sequence[dict], adaptive_rows: Sequence[dict]) -> list[dict]:
    """One row per prefix with the frozen-bank and the adaptive ε_lower next to ε_theory.

    Args: ``_composed_audit`` rows and ``_adaptive_audit`` rows of the same canary and transcript (T each).

    Returns:
        list of T dicts: ``releases``, ``epsilon_theory``, ``epsilon_lower_frozen``, ``epsilon_lower_adaptive``,
        ``frac_retention_changed``, ``frac_bank_changed``, ``n_banks``.

    Raises:
        ValueError: if the two lists differ in length or prefixes.
    """
    if len(frozen_rows) != len(adaptive_rows) or any(
            f["releases"] != a["releases"] for f, a in zip(frozen_rows, adaptive_rows)):
        raise ValueError("frozen_rows and adaptive_rows must cover the same prefixes (same transcript)")
    return [{"releases": f["releases"], "epsilon_theory": f["epsilon_theory"],
             "epsilon_lower_frozen": f["epsilon_lower"], "epsilon_lower_adaptive": a["epsilon_lower"],
             "frac_retention_changed": a["frac_retention_changed"], "frac_bank_changed": a["frac_bank_changed"],
             "n_banks": a["n_banks"]} for f, a in zip(frozen_rows, adaptive_rows)]
