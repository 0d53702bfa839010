"""The adaptive multi-round audit (Alg. A.1, App. E.8 Eq. 36): the canary's sampled votes can change the retained
set and every later bank. With the run's background and noise fixed, the transcript is a function of the canary's
participation J_1..J_T: ``transcript_tree`` builds each distinct bank once and ``_adaptive_audit`` moves each trial
down the tree, scoring ℓ_mix,t (Eqs. 14, 22) on its bank. H0 trials follow the canary-free transcript.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from pe_kit.audit.accounting import epsilon_theory_prefixes
from pe_kit.audit.composed import RoundProblem, _prefix_audit, _resize, bank_problem
from pe_kit.audit.moments import mixture_llr
from pe_kit.audit.trials import simulate_scores
from pe_kit.cache import content_hash
from pe_kit.settings import AuditConfig, MechanismConfig
from pe_kit.pe.multiround import FrozenBank, PEConfig, Population, Transcript, next_bank, pe_round, release_round
from pe_kit.text.variation import build_feedback

__all__ = ["TreeNode", "transcript_tree", "side_by_side"]


@dataclass
class TreeNode:
    """One distinct bank S^(t) reachable by some canary participation pattern: ``seen``: every text of S^(0..t);
    ``reference``: the canary-free S^(t); ``next_absent``, ``next_present``: the next round's node when the canary is
    not / is sampled in round t (−1 in the last); ``changes_retention``: its votes change the retained set."""

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
    """Every bank the adaptive process can reach under H1: T lists of ``TreeNode`` (node 0: the canary-free bank)
    from the canary-free ``run_pe`` ``transcript``, its voting users ``private`` and the run's generator, encoder,
    mechanism and config. Raises ValueError if the canary is not one user, the transcript is empty, or more than
    ``max_banks`` banks are needed."""
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
                    test: Population, mechanism: MechanismConfig, audit: AuditConfig,
                    rng: np.random.Generator) -> list[dict]:
    """ε_lower per prefix t = 1..T of the adaptive transcript (Eq. 36): J_{i,t} ~ Bernoulli(q) under H1 picks trial
    i's node, ℓ_mix,t on its ``RoundProblem`` summed, each prefix bounded by ``_prefix_audit``. Returns T dicts
    (``frac_retention_changed`` / ``frac_bank_changed``: shares of H1 test trials by round t). Raises ValueError on
    an empty tree or σ = 0."""
    if not tree or not tree[0]:
        raise ValueError("tree is empty: build it with transcript_tree")
    T, q, n = len(tree), mechanism.sample_rate, audit.trials
    eps_theory = epsilon_theory_prefixes(mechanism.noise_multiplier, q, audit.delta, T)
    resize = _resize(calibration, test, rng)
    for nodes in tree:
        for node in nodes:
            if node.problem is None:
                node.problem = bank_problem(node.bank, node.round, canary, aux, calibration, test, mechanism, audit,
                                            resize)
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
                    ell = simulate_scores(prob, 0, idx.size, rng) + joined[idx] * prob.canary_shift
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
    """One row per prefix with the frozen-bank and the adaptive ε_lower next to ε_theory. Raises ValueError if the
    prefixes differ."""
    if len(frozen_rows) != len(adaptive_rows) or any(
            f["releases"] != a["releases"] for f, a in zip(frozen_rows, adaptive_rows)):
        raise ValueError("frozen_rows and adaptive_rows must cover the same prefixes (same transcript)")
    return [{"releases": f["releases"], "epsilon_theory": f["epsilon_theory"],
             "epsilon_lower_frozen": f["epsilon_lower"], "epsilon_lower_adaptive": a["epsilon_lower"],
             "frac_retention_changed": a["frac_retention_changed"], "frac_bank_changed": a["frac_bank_changed"],
             "n_banks": a["n_banks"]} for f, a in zip(frozen_rows, adaptive_rows)]
