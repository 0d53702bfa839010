"""Seeded bugs: mutants of the reference PE release, one bug class seen in DP / PE code each.

Every mutant is a ``release_protocol.ReleasePipeline`` that overrides exactly one step of the reference
(Eq. 1, Alg. A.1 lines 7–20), and derives in its docstring whether the bug breaks the claimed guarantee —
the (ε_theory, δ) of the Poisson-subsampled Gaussian mechanism with sensitivity C, noise std σC and rate q
under add/remove-one-user neighbours (paper §2, App. D: Opacus PRV). ``breaks_guarantee(config, n_users)``
returns that verdict for a setting; the audit suite (``pe_kit.audit.blackbox._audit_suite``) must flag
exactly the mutants whose verdict is True.

The derivations use three facts. (F1) Post-processing: anything computed from the release alone costs no
privacy. (F2) The Gaussian mechanism with ℓ2 sensitivity Δ and noise std s is μ-GDP with μ = Δ/s; its
Poisson-subsampled form at rate q is what the accountant prices at noise multiplier s/Δ, and ε(δ) grows
strictly as the noise multiplier falls or q rises (for q < 1). (F3) A user's contribution v_u is a
function of that user's records and the public bank only; clipping bounds ‖v_u‖₂ ≤ C, and by-vote
normalisation gives ‖h̄_u‖₂ ≤ 1/√k (all k votes of every record on the same k entries is the maximum).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy import stats

from pe_kit.pe.mechanism import contributions, topk_routes
from pe_kit.pe.release_protocol import ReferenceRelease, ReleasePipeline

__all__ = ["NoiseStdNotScaled", "NoClipping", "CanaryAlwaysIncluded", "FixedSizeSample", "FixedNoiseSeed",
           "NoiseOnNonzeroOnly", "RawCounts", "TiesHighestIndex", "Float32Accumulation", "NoiseShrinksWithUsers",
           "ClipAtTwiceC", "RecordLevelSampling", "MUTANTS",
           "all_implementations", "FLOAT32_UNIT_ROUNDOFF"]

FLOAT32_UNIT_ROUNDOFF = 2.0 ** -24


class _Mutant(ReleasePipeline):
    """A mutant: ``name``, ``bug`` (one line) and ``breaks_guarantee(config, n_users)`` (the docstring's
    verdict: whether the release breaks the (ε_theory, δ) guarantee at ``config`` with ``n_users`` users)."""

    bug = ""


class NoiseStdNotScaled(_Mutant):
    """Noise std σ instead of σ·C (the noise multiplier used as the std).

    Derivation: the release is the Gaussian mechanism with sensitivity C and noise std σ, i.e. noise
    multiplier σ/C (F2). It breaks the guarantee iff σ/C < σ, i.e. iff **C > 1**. At the paper's C = 0.1 the
    noise is 10× *larger* than claimed: a utility bug, not a privacy bug (μ_eff ≤ C/σ = 0.1/σ), and an
    audit must not flag it.
    """

    name, bug = "noise_std_not_scaled", "noise std σ instead of σC"

    def noise(self, totals, coords, bank_size, config, rng):
        return totals + rng.normal(0.0, config.noise_multiplier, size=totals.shape)

    def breaks_guarantee(self, config, n_users):
        return config.clip_norm > 1.0


class NoClipping(_Mutant):
    """No L2 clipping: v_u = h̄_u.

    Derivation: by F3 ‖h̄_u‖₂ ≤ 1/√k, attained by a user whose records all vote on the same k entries, so the
    sensitivity is 1/√k instead of C: the noise multiplier falls from σ to σC√k (F2). It breaks the guarantee
    iff **C < 1/√k** (k = 5, C = 0.1: 4.47× the claimed sensitivity, μ_eff up to 4.47/σ). The audit's canary
    for this bug concentrates all votes on k probes (``attack.bug_canaries``, design ``concentrated``).
    """

    name, bug = "no_clipping", "no L2 clipping of h̄_u"

    def contributions(self, routes, owner, n_users, bank_size, config):
        return contributions(routes, owner, n_users, bank_size, np.inf)

    def breaks_guarantee(self, config, n_users):
        return config.clip_norm < 1.0 / np.sqrt(config.top_k)


class CanaryAlwaysIncluded(_Mutant):
    """The last user row is exempt from Poisson sampling (always in): an off-by-one in the sampling mask
    (``mask = append(rng.random(N − 1) < q, True)``). The auditor places the canary last.

    Derivation: that user's inclusion is certain, so its privacy is the *un*-subsampled Gaussian at noise
    multiplier σ (F2 at q = 1): ε(σ, 1, δ) > ε(σ, q, δ) for every q < 1. It breaks the guarantee iff
    **q < 1** (for that user; the others keep theirs).
    """

    name, bug = "canary_always_included", "last user exempt from Poisson sampling"

    def participation(self, n_users, config, rng, n_releases):
        mask = rng.random((n_releases, n_users)) < config.sample_rate
        mask[:, -1] = True
        return mask

    def breaks_guarantee(self, config, n_users):
        return config.sample_rate < 1.0


class FixedSizeSample(_Mutant):
    """A fixed-size sample: m = max(1, round(q·N)) users uniformly without replacement, in place of Poisson.

    Derivation (add/remove neighbours, the guarantee's): with the canary added to N users, it is sampled
    with probability m/(N+1) ≈ q, and when it is, it *displaces* one of the others. Take the N others
    identical with contribution c ⊥ v (nonnegative votes on other entries, ‖c‖ = ‖v‖ = C): without the
    canary the sum is m·c exactly; with it, m·c or m·c + (v − c). That is the subsampled Gaussian with
    sensitivity ‖v − c‖ = √2·C, i.e. noise multiplier σ/√2 (F2), so ε(σ/√2, ≈q, δ) > ε(σ, q, δ): it breaks the
    guarantee iff **q < 1 and m < N + 1** (with every user sampled there is nothing to displace).
    (Nonnegative votes cap the displacement at √2C: ‖v − c‖² = ‖v‖² + ‖c‖² − 2v·c ≤ 2C².) The audit's canary
    for this bug is the ``displacement`` design of ``attack.bug_canaries``.
    """

    name, bug = "fixed_size_sample", "fixed-size sample instead of Poisson"

    def participation(self, n_users, config, rng, n_releases):
        m = max(1, int(round(config.sample_rate * n_users)))
        keys = rng.random((n_releases, n_users))
        chosen = np.argpartition(keys, m - 1, axis=1)[:, :m] if m < n_users else np.tile(np.arange(n_users),
                                                                                         (n_releases, 1))
        mask = np.zeros((n_releases, n_users), dtype=bool)
        np.put_along_axis(mask, chosen, True, axis=1)
        return mask

    def breaks_guarantee(self, config, n_users):
        m = max(1, int(round(config.sample_rate * n_users)))
        return config.sample_rate < 1.0 and m < n_users


class FixedNoiseSeed(_Mutant):
    """Noise drawn from a fixed seed: the same noise vector z* in every release (``default_rng(0)``).

    Derivation: given z*, the release Σ I_u v_u + z* is a deterministic function of the participants, so a
    canary with v ≠ 0 is seen exactly whenever it participates: with probability q the output lies outside
    the support of the canary-free release. No finite ε holds at any δ < q: it breaks the guarantee for
    every setting with q > δ (always, at the kit's δ ≤ 10⁻³).
    """

    name, bug = "fixed_noise_seed", "noise from a fixed seed (identical across releases)"
    seed = 0

    def noise(self, totals, coords, bank_size, config, rng):
        z = np.random.default_rng(self.seed).normal(0.0, config.noise_std, size=bank_size)
        return totals + z[np.asarray(coords)]

    def breaks_guarantee(self, config, n_users):
        return True


class NoiseOnNonzeroOnly(_Mutant):
    """Noise added only to the coordinates whose noiseless sum is non-zero.

    Derivation: a coordinate that no participant voted on is released as exactly 0. A canary whose votes
    land on entries nobody else votes on turns them non-zero (almost surely, after noise) whenever it
    participates, and they are exactly 0 otherwise: the event "coordinate j is 0" has probability 1 without
    the canary and 1 − q with it, so no finite ε holds at δ < q. It breaks the guarantee (always, at the
    kit's δ).
    """

    name, bug = "noise_on_nonzero_only", "noise only on non-zero coordinates"

    def noise(self, totals, coords, bank_size, config, rng):
        z = rng.normal(0.0, config.noise_std, size=totals.shape)
        return totals + np.where(totals != 0, z, 0.0)

    def breaks_guarantee(self, config, n_users):
        return True


class RawCounts(_Mutant):
    """Votes not normalised per user: raw counts (k per record), still clipped to C.

    Derivation: the clip still enforces ‖v_u‖₂ ≤ C, and v_u is still a function of the user's own records
    and the public bank (F3), so the sensitivity is C and the release is exactly the claimed mechanism
    (F2). It does **not** break the guarantee (it changes utility: heavy users hit the clip at full C).
    """

    name, bug = "raw_counts", "votes not normalised per user (raw counts, clipped)"

    def contributions(self, routes, owner, n_users, bank_size, config):
        routes = np.asarray(routes)
        owner = np.asarray(owner, dtype=np.int64)
        n, k = routes.shape
        rows = np.repeat(owner, k)
        h = sp.csr_matrix((np.ones(rows.size), (rows, routes.ravel())), shape=(n_users, bank_size))
        h.sum_duplicates()
        norms = np.sqrt(np.asarray(h.multiply(h).sum(axis=1)).ravel())
        scale = np.ones(n_users)
        big = norms > config.clip_norm
        scale[big] = config.clip_norm / norms[big]
        return sp.csr_matrix(sp.diags(scale) @ h)

    def breaks_guarantee(self, config, n_users):
        return False


class TiesHighestIndex(_Mutant):
    """Exact ties in top-k routing broken to the *highest* bank index instead of the lowest.

    Derivation: routing is still a deterministic function of one record and the public bank, so v_u is
    still a function of user u's data alone, clipped to C (F3): the sensitivity is unchanged and the
    release is the claimed mechanism. It does **not** break the guarantee (it changes which entry gets a
    tied vote: a reproducibility bug).
    """

    name, bug = "ties_highest_index", "ties broken to the highest index"

    def routes(self, bank, records, config):
        p = bank.shape[0]
        return (p - 1) - topk_routes(records, np.ascontiguousarray(bank[::-1]), config.top_k)

    def breaks_guarantee(self, config, n_users):
        return False


class Float32Accumulation(_Mutant):
    """The sum Σ_u I_u v_u accumulated in float32 (noise still float64).

    Derivation: the release is fl₃₂(S) + Z. For neighbouring participant sets the difference of the rounded
    sums is v + e with ‖e‖₂ ≤ 2(N − 1)·u·Σ_u‖v_u‖₂ ≤ 2N²·u·C (Higham's bound for recursive summation,
    u = 2⁻²⁴): an effective sensitivity C(1 + 2N²u). While 2N²u ≤ 10⁻³ (N ≤ 91 users) the noise multiplier
    moves by at most 0.1%, which changes ε by ≈ 2ε·10⁻³ — below the accountant's own discretisation
    (eps_error 0.01) for every ε ≤ 5: it does **not** break the guarantee there. Beyond that range the
    worst-case bound no longer certifies it (the typical error, √N·u, stays far smaller; floating-point
    attacks on DP target the noise sampler, which this mutant
    leaves in float64).
    """

    name, bug = "float32_accumulation", "float32 accumulation of the sum"

    def accumulate(self, mask, contribs):
        return (mask.astype(np.float32) @ contribs.astype(np.float32)).astype(np.float64)

    def breaks_guarantee(self, config, n_users):
        return 2.0 * n_users ** 2 * FLOAT32_UNIT_ROUNDOFF > 1e-3


class NoiseShrinksWithUsers(_Mutant):
    """Noise std σC/√max(1, M), M the number of users sampled in the release (noise "shared" among participants).

    Derivation: take N = n_users − 1 other users whose votes avoid the canary's entries (F3 allows it) and read the
    release along v/‖v‖ (post-processing, F1): X = I·C + s_M·ξ, ξ ~ N(0, 1), s_M = σC/√max(1, M), M = M' + I with
    M' ~ Bin(N, q) the others sampled and I ~ Bern(q) the canary. The claimed mechanism is the same with s ≡ σC,
    the Poisson-subsampled Gaussian whose pair (X | absent, X | present) is tight (F2). ``breaks_guarantee``
    computes both privacy profiles δ(ε) = ∫ (p₁ − e^ε p₀)₊ (add and remove directions, on a grid) and returns True
    iff the projection's δ at ε + 0.01 exceeds the claimed δ at ε for some ε in [0, 10]: the release is then not
    (ε_theory, δ)-DP at that δ, whatever the accountant's discretisation (eps_error 0.01). With N = 0 the noise is
    σC whether or not the canary is sampled (False); the leak grows with q·N, the typical M.
    """

    name, bug = "noise_shrinks_with_users", "noise std σC/√(#sampled users)"

    def accumulate(self, mask, contribs):
        self._sampled = mask.sum(axis=1)
        return super().accumulate(mask, contribs)

    def noise(self, totals, coords, bank_size, config, rng):
        scale = 1.0 / np.sqrt(np.maximum(self._sampled, 1))[:, None]
        return totals + scale * rng.normal(0.0, config.noise_std, size=totals.shape)

    def breaks_guarantee(self, config, n_users):
        sigma, q, others = config.noise_multiplier, config.sample_rate, int(n_users) - 1
        if others < 1:
            return False
        m = np.arange(others + 2)
        weights = stats.binom.pmf(m[:-1], others, q)
        x = np.linspace(-12 * sigma, 1 + 12 * sigma, 20_001)[:, None]
        std = sigma / np.sqrt(np.maximum(m, 1))
        p0 = stats.norm.pdf(x, 0, std[:-1]) @ weights
        p1 = (1 - q) * p0 + q * (stats.norm.pdf(x, 1, std[1:]) @ weights)
        c0, c1 = stats.norm.pdf(x[:, 0], 0, sigma), (1 - q) * stats.norm.pdf(x[:, 0], 0, sigma) + q * stats.norm.pdf(
            x[:, 0], 1, sigma)
        dx = x[1, 0] - x[0, 0]

        def profile(a, b, eps):
            return np.maximum(a[None, :] - np.exp(eps)[:, None] * b[None, :], 0).sum(axis=1) * dx

        eps = np.linspace(0, 10, 201)
        return bool(np.any(profile(p1, p0, eps + 0.01) > profile(c1, c0, eps))
                    or np.any(profile(p0, p1, eps + 0.01) > profile(c0, c1, eps)))


class ClipAtTwiceC(_Mutant):
    """Clipping to 2C instead of C: v_u = h̄_u·min(1, 2C/‖h̄_u‖₂).

    Derivation: by F3 ‖h̄_u‖₂ ≤ 1/√k, and a user with one record attains it (its k votes fall on k distinct entries),
    so the sensitivity is min(2C, 1/√k) instead of C: the noise multiplier falls from σ to σC/min(2C, 1/√k) (F2). It
    breaks the guarantee iff **C < 1/√k**, i.e. iff clipping binds at all (k = 5, C = 0.1: 2× the claimed
    sensitivity, μ_eff up to 2/σ). The design battery's ``sensitivity`` design aims at it.
    """

    name, bug = "clip_at_twice_c", "clipping to 2C"

    def contributions(self, routes, owner, n_users, bank_size, config):
        return contributions(routes, owner, n_users, bank_size, 2.0 * config.clip_norm)

    def breaks_guarantee(self, config, n_users):
        return config.clip_norm < 1.0 / np.sqrt(config.top_k)


class RecordLevelSampling(_Mutant):
    """Poisson sampling of records instead of users: each record joins w.p. q, per release, and a user's votes are
    normalised over its records that joined, then clipped to C.

    Derivation: take a user whose m records are equal (the neighbouring relation allows any records): whenever one
    or more of them joins, its normalised votes are h̄_u, clipped to v_u, so it enters the sum w.p. q_m = 1 − (1 − q)^m
    with the contribution the claim prices; every user's contribution still has norm ≤ C (F3). The release is the
    Poisson-subsampled Gaussian at rate q_m for that user, and q_m > q iff m ≥ 2 and q < 1 (F2): it breaks the
    guarantee iff **q < 1 and the record cap m ≥ 2** (m = 16, q = 0.1: q_m = 0.81). A single-record user is
    sampled exactly as claimed; the leak grows with the records a user holds.

    The deterministic stage (``snapshot``) is the (n_records, p) routing matrix whose row r holds owner_r + 1 on the
    k entries record r votes for; each release samples its rows.
    """

    name, bug = "record_level_sampling", "records sampled instead of users"

    def contributions(self, routes, owner, n_users, bank_size, config):
        n, k = routes.shape
        return sp.csr_matrix((np.repeat(np.asarray(owner, np.float64) + 1.0, k), (np.repeat(np.arange(n), k),
                                                                                   np.asarray(routes).ravel())),
                             shape=(n, bank_size))

    def _randomised(self, snapshot, config, rng, n_releases, coords, chunk_size=8192):
        snapshot = sp.csr_matrix(snapshot)
        owner = snapshot.max(axis=1).toarray().ravel().astype(np.int64) - 1
        votes = (snapshot > 0).astype(np.float64).tocsr()
        k, out = config.top_k, np.empty((n_releases, np.size(coords)))
        for start in range(0, n_releases, chunk_size):
            mask = (rng.random((min(chunk_size, n_releases - start), owner.size)) < config.sample_rate).astype(float)
            total = np.zeros((mask.shape[0], np.size(coords)))
            for u in np.unique(owner):  # user u's sampled records: counts c on P, ‖c‖² over all p, n sampled
                rows = np.flatnonzero(owner == u)
                m, r = mask[:, rows], votes[rows]
                n = m.sum(axis=1)
                norm = np.sqrt(np.einsum("ti,ti->t", m @ (r @ r.T).toarray(), m)) / np.maximum(n * k, 1)
                scale = np.where(n > 0, np.minimum(1.0, config.clip_norm / np.maximum(norm, 1e-300)), 0.0)
                total += (scale / np.maximum(n * k, 1))[:, None] * (m @ r[:, coords].toarray())
            out[start:start + mask.shape[0]] = total + rng.normal(0.0, config.noise_std, total.shape)
        return out

    def breaks_guarantee(self, config, n_users):
        return config.sample_rate < 1.0 and config.record_cap >= 2


#: the mutant classes of the suite (notebook 07: each on its fixed-size design), in its order; ``NoiseShrinksWithUsers``
#: needs a population that grows, ``ClipAtTwiceC`` every user sampled and ``RecordLevelSampling`` users with many
#: records, so the design battery (``population``, ``sensitivity`` and ``records`` axes) audits them instead
MUTANTS = (NoiseStdNotScaled, NoClipping, CanaryAlwaysIncluded, FixedSizeSample, FixedNoiseSeed,
           NoiseOnNonzeroOnly, RawCounts, TiesHighestIndex, Float32Accumulation)


def all_implementations() -> list[ReleasePipeline]:
    """The reference release followed by one instance of every mutant (``MUTANTS`` order)."""
    return [ReferenceRelease()] + [m() for m in MUTANTS]
