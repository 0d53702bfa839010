"""Fit a preset's sizes to a smaller corpus (``pe-kit reproduce --fit-data``) and warn when sizes are too small.

The fit keeps the protocol (§3, App. D): canaries have exactly m records and their own split; calibration and
test are distinct users of equal size N; the exact variant inserts r = m copies; a ``public`` bank uses users in
no split. Only sizes shrink; a ``--set`` value is never changed. Rules (each reported by :func:`fit_preset`):

* ``record_cap`` m: kept when half the users have m records, else the median records per user.
* U users of the arm, E of them with exactly m; ``n_canary`` = min(preset, E, max(per_variant, U // 10)).
* a ``public`` bank keeps a quarter of the remaining users; the rest S splits as 500 : 1000 : 1000, i.e.
  N = ⌊S / 2.5⌋ calibration = test users and S − 2N aux users.
* ``bank_size`` p ≤ 80 % of the public records, in steps of 64, and ≥ 2·max_probes.
* notebook 06: p capped at the fitted p; without rounds · p new public texts it switches to ``wordnet`` with
  ``max_attempts`` = 20.

Stability thresholds (:func:`stability_warnings`) are measured by ``benchmarks/small_data_stability.py``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from pe_kit.settings import Preset

__all__ = ["DataProfile", "FitResult", "data_profile", "reserved_for", "banks_used", "arms_used", "fit_preset",
           "stability_warnings", "MIN_USERS_PER_SPLIT", "MIN_MAUVE_SAMPLES"]

#: Calibration/test users below which single ε_lower values are noise (``benchmarks/small_data_stability.py``; the
#: spread it measured is in the warning, :func:`stability_warnings`).
MIN_USERS_PER_SPLIT = 50
#: Samples per side below which MAUVE was not measured stable (two disjoint samples of the bundled Blogs records).
MIN_MAUVE_SAMPLES = 50
_NB06 = "06_multiround_mauve"


@dataclass(frozen=True)
class DataProfile:
    """Records per user (int (U,), capped at ``cap`` = m) and of the bank-B example authors present (``reserved``)."""

    source: str
    fmt: str
    records: np.ndarray
    cap: int
    reserved: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def arm_users(self, arm: str, m: int) -> int:
        """Users of ``arm`` at record cap m (long: ≥ m records; short: ≥ max(1, m // 2); ``splits.make_arm``) that
        a private split may take: the reserved users are not counted."""
        lo = m if arm == "long" else max(1, m // 2)
        return int((self.records >= lo).sum() - (self.reserved >= lo).sum())

    def canary_users(self, m: int) -> int:
        """Canary-eligible users (§3): at least m records (exactly m after the cap), reserved users not counted."""
        return self.arm_users("long", m)

    def mean_records(self, m: int) -> float:
        """Mean records per user at record cap m."""
        return float(np.mean(np.minimum(self.records, m)))


def data_profile(data: str, fmt: str = "auto", record_cap: int = 64, on_error: str = "raise",
                 isolated: bool = False, reserved=frozenset()) -> DataProfile:
    """Records per user of ``data`` capped at ``record_cap`` (pass 1 only), in a child process when ``isolated``;
    ``reserved`` user ids (:func:`reserved_for`) are counted apart. Raises what ``load_corpus`` raises."""
    from pe_kit.data import corpus_cache

    if isolated:
        got = corpus_cache.run_isolated("profile", data=data, fmt=fmt, record_cap=record_cap, on_error=on_error,
                                        reserved=sorted(reserved))
        return DataProfile(str(data), fmt, np.asarray(got["records"], dtype=np.int64), record_cap,
                           np.asarray(got.get("reserved", []), dtype=np.int64))
    scan = corpus_cache.cached_scan(data, fmt, on_error=on_error)
    return DataProfile(str(data), fmt, scan.records_per_user(record_cap), record_cap,
                       scan.reserved_records(reserved, record_cap))


def _used(p: Preset, notebooks: Sequence[str] | None, key: str) -> set:
    """The values of ``key`` (``arm`` or ``bank``) the given notebooks read (None: every notebook of ``p``): 04 the
    plural (``arms`` / ``banks``), 05 also ``sweep_arm``, 07 none (synthetic data), every other its own value."""
    out = set()
    for nb in p.notebooks if notebooks is None else notebooks:
        num = nb.split("_")[0]
        if num == "04":
            out |= {str(v) for v in getattr(p, f"{key}s")}
        elif num != "07":
            out.add(str(_notebook_value(p, nb, key)))
            if num == "05" and key == "arm":
                out.add(str(_notebook_value(p, nb, "sweep_arm")))
    return out


def banks_used(p: Preset, notebooks: Sequence[str] | None = None) -> set:
    """The banks the given notebooks build worlds on (:func:`_used`)."""
    return _used(p, notebooks, "bank")


def reserved_for(p: Preset, notebooks: Sequence[str] | None = None) -> frozenset:
    """User ids a world of ``p`` keeps out of its private splits: the example authors of every bank-B file a running
    notebook uses (:func:`banks_used`, ``study.world.bank_reserved_users``)."""
    from pe_kit.study.world import bank_reserved_users

    return frozenset().union(*(bank_reserved_users(b) for b in banks_used(p, notebooks)))


@dataclass(frozen=True)
class FitResult:
    """What :func:`fit_preset` chose: ``changes`` (setting → (old, new)), ``reasons`` (one line per decision), and
    ``definite`` (the preset certainly does not fit, not only by the public bank's estimate)."""

    preset: Preset
    changes: dict
    reasons: list
    fitted: bool
    definite: bool = False

    def summary(self) -> str:
        if not self.fitted:
            return "the preset's sizes fit the data; nothing changed"
        ch = ", ".join(f"{k}={new} (was {old})" for k, (old, new) in self.changes.items())
        return f"sizes fitted to the data: {ch}. Why: " + "; ".join(self.reasons)


def _notebook_value(p: Preset, nb: str, key: str):
    """The value of setting ``key`` that notebook ``nb`` runs with: its own (``p.view(nb)``) or the preset's."""
    return p.view(nb)[key] if nb in p.notebooks else getattr(p, key)


def arms_used(p: Preset, notebooks: Sequence[str] | None = None) -> set:
    """The data arms the given notebooks read (:func:`_used`)."""
    return _used(p, notebooks, "arm")


def _uses_public(p: Preset) -> bool:
    return "public" in p.banks or p.bank == "public"


def _needs(p: Preset, prof: DataProfile, arms: set) -> list[tuple[str, bool]]:
    """Why ``p`` does not fit ``prof``: (reason, definite) pairs, empty when it fits. ``definite`` is False for
    the public bank's size, which is estimated from the mean records per user."""
    m = p.record_cap
    u = min((prof.arm_users(a, m) for a in arms), default=len(prof.records))
    e = prof.canary_users(m)
    out = []
    if e < p.n_canary:
        out.append((f"{e} users have record_cap={m} records, n_canary={p.n_canary} needed", True))
    used = p.n_canary + p.n_aux + p.n_calibration + p.n_test
    if used > u:
        out.append((f"n_canary + n_aux + n_calibration + n_test = {used} > {u} users in the data arm", True))
    elif _uses_public(p):
        public_records = (u - used) * prof.mean_records(m)
        if u == used:   # certain: no user is left to make the public bank of
            out.append((f"the public bank needs users in no split, and n_canary + n_aux + n_calibration + n_test = "
                        f"{used} takes all {u} users of the data arm; lower those sizes or drop the public bank "
                        "(--set banks=bankA --set bank=bankA)", True))
        elif public_records < p.bank_size:
            out.append((f"the public bank needs bank_size={p.bank_size} texts; users in no split hold ~"
                        f"{public_records:.0f}", False))
    return out


def _fit_nb06(p: Preset, fixed: set, bank_size: int, max_probes: int, pool: float, reasons: list) -> dict:
    """Notebook 06's own values fitted to the data (module docstring; ``pool``: the public texts left after the
    bank). Appends to ``reasons``."""
    nb06 = dict(p.extra.get(_NB06, {}))
    if "bank_size" not in nb06 or nb06["bank_size"] > bank_size:
        nb06["bank_size"] = min(nb06.get("bank_size", bank_size), bank_size)
    rounds = int(nb06.get("rounds", p.view(_NB06)["rounds"]))
    need = rounds * (nb06["bank_size"] - min(max_probes, nb06["bank_size"]))
    v06 = {**p.view(_NB06), **nb06}
    if v06["generator"] == "public-retrieval" and not {"generator", f"{_NB06}.generator"} & fixed \
            and pool < 1.25 * need:
        nb06["generator"] = "wordnet"
        reasons.append(f"notebook 06 generator=wordnet: {rounds} rounds of public retrieval need ~{1.25 * need:.0f} "
                       f"unused public texts and the data leaves ~{max(pool, 0):.0f}")
        if not {"max_attempts", f"{_NB06}.max_attempts"} & fixed:
            nb06["max_attempts"] = max(int(v06["max_attempts"]), 20)
            reasons.append("notebook 06 max_attempts=20: ~19 paraphrases of each retained text per round exhaust "
                           "WordNet's synonyms of short texts within the default 5 calls (measured: 361 of 362 on "
                           "60 × 40 tweets)")
    return nb06


def fit_preset(p: Preset, prof: DataProfile, fixed: Sequence[str] = (), notebooks: Sequence[str] | None = None
               ) -> FitResult:
    """Shrink ``p``'s sizes to fit ``prof`` (module docstring), never changing the ``fixed`` (``--set``) settings;
    ``notebooks``: those that will run (None = all). Returns ``FitResult`` (``fitted`` False when ``p`` already
    fits). Raises ValueError when even the smallest protocol-keeping sizes do not fit or a ``fixed`` setting blocks
    the fit, naming the ``--set`` keys to change."""
    fixed = set(fixed)
    arms = arms_used(p, notebooks)
    problems = _needs(p, prof, arms) if arms else []  # no arms (e.g. only notebook 07): no data is read
    if not problems:
        return FitResult(p, {}, [], False)
    reasons = [" and ".join(msg for msg, _ in problems)]
    definite = any(d for _, d in problems)
    users_total = len(prof.records)
    if users_total == 0:
        raise ValueError(f"data {prof.source} has no user with records; check --format and on_error")
    m = p.record_cap
    if "record_cap" not in fixed and prof.canary_users(m) < math.ceil(users_total / 2):
        m = max(1, int(np.median(prof.records)))
        reasons.append(f"record_cap={m}: the median records per user (canaries need exactly m records; "
                       f"{prof.canary_users(m)} of {users_total} users have them)")
    u = min(prof.arm_users(a, m) for a in arms)
    e = prof.canary_users(m)
    n_canary = p.n_canary if "n_canary" in fixed else min(p.n_canary, e, max(p.per_variant, u // 10))
    per_variant = p.per_variant if "per_variant" in fixed else min(p.per_variant, max(1, n_canary))
    if 5 * per_variant > n_canary:
        reasons.append(f"n_canary={n_canary}, per_variant={per_variant}: the five real-canary variants share "
                       "canaries (blocks wrap around; the paper gives each its own five)")
    rest = u - n_canary
    pub = math.ceil(rest / 4) if _uses_public(p) else 0
    s = rest - pub
    n = min(p.n_test, s * 2 // 5)
    if "n_test" in fixed or "n_calibration" in fixed:
        n = p.n_test if "n_test" in fixed else p.n_calibration
    aux = p.n_aux if "n_aux" in fixed else min(p.n_aux, s - 2 * n)
    if min(n_canary, aux, n) < 1 or n_canary + aux + 2 * n > u:
        raise ValueError(f"data {prof.source}: {u} users in the data arm at record_cap={m} ({e} with exactly m "
                         f"records) cannot hold n_canary={n_canary} + n_aux={aux} + n_calibration = n_test={n}"
                         f"{' plus public-bank users' if pub else ''}; lower the fixed settings "
                         f"({', '.join(sorted(fixed)) or 'none'}) or pass a corpus with more users")
    left = f", {u - n_canary - aux - 2 * n} left for the public bank" if pub else ""
    reasons.append(f"{u} users in the data arm: {n_canary} canaries, {aux} aux, {n} calibration = {n} test "
                   f"(aux : N as the paper's 500 : 1000){left}")
    bank_size, max_probes = p.bank_size, p.max_probes
    public_records = (u - n_canary - aux - 2 * n) * prof.mean_records(m)
    if pub and "bank_size" not in fixed:
        bank_size = min(p.bank_size, max(64, int(0.8 * public_records) // 64 * 64))
        if bank_size < p.bank_size:
            reasons.append(f"bank_size={bank_size}: ≤ 80 % of the ~{public_records:.0f} records of users in no split")
    if max_probes > bank_size and "max_probes" not in fixed:
        max_probes = max(m, bank_size // 2)
    if max_probes < m:
        reasons.append(f"max_probes={max_probes} < record_cap={m}: the exact variant (r = m) cannot run")
    if bank_size < max_probes or (pub and public_records < bank_size):
        raise ValueError(f"data {prof.source}: users in no split hold ~{public_records:.0f} records, too few for "
                         f"a public bank of bank_size={bank_size} with max_probes={max_probes}; lower bank_size / "
                         "max_probes (--set bank_size=…) or use a bank file (--set banks=PATH --set bank=PATH)")
    nb06 = _fit_nb06(p, fixed, bank_size, max_probes, public_records - (bank_size if pub else 0), reasons)
    new = p.with_values({"record_cap": m, "n_canary": n_canary, "per_variant": per_variant, "n_aux": aux,
                         "n_calibration": n, "n_test": n, "bank_size": bank_size, "max_probes": max_probes,
                         **{f"{_NB06}.{k}": v for k, v in nb06.items()}})
    old_d, new_d = p.shared_values(), new.shared_values()
    changes = {k: (old_d[k], new_d[k]) for k in new_d if old_d[k] != new_d[k]}
    for k, v in nb06.items():
        if p.extra.get(_NB06, {}).get(k) != v:
            changes[f"06.{k}"] = (p.extra.get(_NB06, {}).get(k, "notebook default"), v)
    return FitResult(new, changes, reasons, True, definite)


def stability_warnings(p: Preset, prof: DataProfile | None = None, notebooks: Sequence[str] | None = None) -> list[str]:
    """Warnings for sizes too small for stable numbers; notebook 06's only when it runs (``notebooks`` None: all).
    ``prof`` None takes records per user as ``record_cap``."""
    out = []
    nb06 = p.view(_NB06)
    runs06 = notebooks is None or _NB06 in notebooks
    if p.n_test < MIN_USERS_PER_SPLIT:
        out.append(f"n_calibration = n_test = {p.n_test} users (< {MIN_USERS_PER_SPLIT}): below "
                   f"{MIN_USERS_PER_SPLIT} users per split ε_lower of one canary spread with sd 0.21–0.32 between "
                   "reruns on the same users (0.10–0.13 at 50–200 users; benchmarks/small_data_stability.py, 10⁵ "
                   "trials), so single values and their changes between variants or rounds are mostly noise; read "
                   "only large gaps")
    if p.n_test < MIN_USERS_PER_SPLIT and runs06:
        q = float(nb06["sample_rate"])
        out.append(f"notebook 06 evolves its population from q·N = {q * p.n_test:.1f} expected voters per round "
                   f"(N = {p.n_test} test users, q = {q:g}): the released histogram is then mostly noise and the "
                   "next population is variations of a few retained texts, so MAUVE collapses after one round "
                   "(60 users × 40 tweets: 0.83 → 0.008 with 1–3 voters per round) — a property of so few users, "
                   "not of the data's utility")
    mean_rec = p.record_cap if prof is None else prof.mean_records(p.record_cap)
    ref = int(p.n_calibration * mean_rec)
    bank06 = int(nb06["bank_size"]) - min(p.max_probes, p.bank_size)
    samples = min(ref, bank06, int(nb06["mauve_samples"] or ref))
    if samples < MIN_MAUVE_SAMPLES and runs06:
        out.append(f"MAUVE (notebook 06) compares ~{samples} samples per side (< {MIN_MAUVE_SAMPLES}, the smallest "
                   "size at which MAUVE of one distribution against itself was measured stable: 0.966 ± 0.015)")
    return out
