"""Seeded bugs: mutants of the reference PE release, each overriding one step of ``release_protocol.ReleasePipeline``
(Eq. 1, Alg. A.1 lines 7–20). ``breaks_guarantee(config, n_users)``: whether it breaks the claimed (ε_theory, δ) of
the Poisson-subsampled Gaussian (sensitivity C, noise σC, rate q, add/remove one user; §2, App. D).
Facts: (F1) post-processing is free; (F2) sensitivity Δ and noise s are priced at noise multiplier s/Δ, ε rising
as it falls or q rises; (F3) v_u depends on user u's records and the bank only, ‖v_u‖₂ ≤ C, ‖h̄_u‖₂ ≤ 1/√k.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy import stats

from pe_kit.pe.mechanism import contributions, topk_routes
from pe_kit.pe.release_protocol import ReferenceRelease, ReleasePipeline

__all__ = ["NoiseStdNotScaled", "NoClipping", "CanaryAlwaysIncluded", "FixedSizeSample", "FixedNoiseSeed",
           "NoiseOnNonzeroOnly", "RawCounts", "TiesHighestIndex", "Float32Accumulation", "NoiseShrinksWithUsers",
           "ClipAtTwiceC", "RecordLevelSampling", "MUTANTS", "all_implementations", "FLOAT32_UNIT_ROUNDOFF"]

FLOAT32_UNIT_ROUNDOFF = 2.0 ** -24


class NoiseStdNotScaled(ReleasePipeline):
    """Noise std σ instead of σ·C: noise multiplier σ/C (F2), breaks the guarantee iff **C > 1**."""

    name, bug = "noise_std_not_scaled", "noise std σ instead of σC"

    def noise(self, totals, coords, bank_size, config, rng):
        return totals + rng.normal(0.0, config.noise_multiplier, size=totals.shape)

    def breaks_guarantee(self, config, n_users):
        return config.clip_norm > 1.0


class NoClipping(ReleasePipeline):
    """No L2 clipping, v_u = h̄_u: sensitivity 1/√k instead of C (F3), breaks the guarantee iff **C < 1/√k**."""

    name, bug = "no_clipping", "no L2 clipping of h̄_u"

    def contributions(self, routes, owner, n_users, bank_size, config):
        return contributions(routes, owner, n_users, bank_size, np.inf)

    def breaks_guarantee(self, config, n_users):
        return config.clip_norm < 1.0 / np.sqrt(config.top_k)


class CanaryAlwaysIncluded(ReleasePipeline):
    """The last user row exempt from Poisson sampling: it gets the un-subsampled Gaussian (F2 at q = 1), breaking the
    guarantee iff **q < 1**."""

    name, bug = "canary_always_included", "last user exempt from Poisson sampling"

    def participation(self, n_users, config, rng, n_releases):
        mask = super().participation(n_users, config, rng, n_releases)
        mask[:, -1] = True
        return mask

    def breaks_guarantee(self, config, n_users):
        return config.sample_rate < 1.0


class FixedSizeSample(ReleasePipeline):
    """A fixed-size sample of m = max(1, round(q·N)) users without replacement, in place of Poisson.

    A sampled canary displaces one of m others: with the others identical (c ⊥ v, ‖c‖ = C) the sum moves by v − c,
    sensitivity √2·C (F2): breaks the guarantee iff **q < 1 and m < N + 1** (the ``displacement`` design).
    """

    name, bug = "fixed_size_sample", "fixed-size sample instead of Poisson"

    def participation(self, n_users, config, rng, n_releases):
        m = max(1, int(round(config.sample_rate * n_users)))
        keys = rng.random((n_releases, n_users))
        return keys <= np.partition(keys, m - 1, axis=1)[:, m - 1:m]  # the users of the m smallest keys

    def breaks_guarantee(self, config, n_users):
        m = max(1, int(round(config.sample_rate * n_users)))
        return config.sample_rate < 1.0 and m < n_users


class FixedNoiseSeed(ReleasePipeline):
    """The same noise vector z* (``default_rng(0)``) in every release: a canary is seen whenever it participates, no
    finite ε at δ < q."""

    name, bug = "fixed_noise_seed", "noise from a fixed seed (identical across releases)"
    seed = 0

    def noise(self, totals, coords, bank_size, config, rng):
        z = np.random.default_rng(self.seed).normal(0.0, config.noise_std, size=bank_size)
        return totals + z[np.asarray(coords)]

    def breaks_guarantee(self, config, n_users):
        return True


class NoiseOnNonzeroOnly(ReleasePipeline):
    """Noise only on the coordinates whose noiseless sum is non-zero: a coordinate only the canary votes on is exactly
    0 without it and non-zero w.p. q with it, no finite ε at δ < q."""

    name, bug = "noise_on_nonzero_only", "noise only on non-zero coordinates"

    def noise(self, totals, coords, bank_size, config, rng):
        z = rng.normal(0.0, config.noise_std, size=totals.shape)
        return totals + np.where(totals != 0, z, 0.0)

    def breaks_guarantee(self, config, n_users):
        return True


class RawCounts(ReleasePipeline):
    """Votes not normalised per user (raw counts), still clipped to C: sensitivity C (F3), does **not** break the
    guarantee."""

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


class TiesHighestIndex(ReleasePipeline):
    """Exact ties in top-k routing broken to the highest bank index: v_u is still a function of user u's data,
    clipped to C (F3), so it does **not** break the guarantee."""

    name, bug = "ties_highest_index", "ties broken to the highest index"

    def routes(self, bank, records, config):
        p = bank.shape[0]
        return (p - 1) - topk_routes(records, np.ascontiguousarray(bank[::-1]), config.top_k)


class Float32Accumulation(ReleasePipeline):
    """The sum Σ_u I_u v_u accumulated in float32 (noise still float64).

    Rounding adds e with ‖e‖₂ ≤ 2N²·u·C (Higham; u = 2⁻²⁴): sensitivity C(1 + 2N²u). While 2N²u ≤ 10⁻³ (N ≤ 91)
    ε moves below the accountant's eps_error 0.01, so it does **not** break the guarantee; beyond, the worst-case
    bound no longer certifies it.
    """

    name, bug = "float32_accumulation", "float32 accumulation of the sum"

    def accumulate(self, mask, contribs):
        return (mask.astype(np.float32) @ contribs.astype(np.float32)).astype(np.float64)

    def breaks_guarantee(self, config, n_users):
        return 2.0 * n_users ** 2 * FLOAT32_UNIT_ROUNDOFF > 1e-3


class NoiseShrinksWithUsers(ReleasePipeline):
    """Noise std σC/√max(1, M), M the users sampled in the release.

    Along v/‖v‖ (F1), with N = n_users − 1 others off the canary's entries: X = I·C + s_M·ξ, s_M = σC/√max(1, M),
    M = M' + I, M' ~ Bin(N, q). ``breaks_guarantee`` compares the privacy profiles δ(ε) = ∫ (p₁ − e^ε p₀)₊ of
    this pair and of the claimed one (both directions, on a grid): True iff δ at ε + 0.01 exceeds the claimed δ
    at ε for some ε ∈ [0, 10]; False for N = 0.
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
        c0 = stats.norm.pdf(x[:, 0], 0, sigma)
        c1 = (1 - q) * c0 + q * stats.norm.pdf(x[:, 0], 1, sigma)
        dx = x[1, 0] - x[0, 0]

        def profile(a, b, eps):
            return np.maximum(a[None, :] - np.exp(eps)[:, None] * b[None, :], 0).sum(axis=1) * dx

        eps = np.linspace(0, 10, 201)
        return bool(np.any(profile(p1, p0, eps + 0.01) > profile(c1, c0, eps))
                    or np.any(profile(p0, p1, eps + 0.01) > profile(c0, c1, eps)))


class ClipAtTwiceC(ReleasePipeline):
    """Clipping to 2C instead of C: sensitivity min(2C, 1/√k) (F3), breaks the guarantee iff **C < 1/√k** (the
    battery's ``sensitivity`` design)."""

    name, bug = "clip_at_twice_c", "clipping to 2C"

    def contributions(self, routes, owner, n_users, bank_size, config):
        return contributions(routes, owner, n_users, bank_size, 2.0 * config.clip_norm)

    breaks_guarantee = NoClipping.breaks_guarantee


class RecordLevelSampling(ReleasePipeline):
    """Poisson sampling of records instead of users; a user's votes are normalised over its sampled records, then
    clipped to C.

    A user with m equal records enters w.p. q_m = 1 − (1 − q)^m with the contribution the claim prices (F2):
    breaks the guarantee iff **q < 1 and the record cap m ≥ 2** (m = 16, q = 0.1: q_m = 0.81). ``snapshot`` is
    the (n_records, p) routing matrix with owner_r + 1 on record r's k entries; each release samples its rows.
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


#: the suite's mutants; the design battery audits the other three
MUTANTS = (NoiseStdNotScaled, NoClipping, CanaryAlwaysIncluded, FixedSizeSample, FixedNoiseSeed,
           NoiseOnNonzeroOnly, RawCounts, TiesHighestIndex, Float32Accumulation)


def all_implementations() -> list[ReleasePipeline]:
    """The reference release followed by one instance of every mutant (``MUTANTS`` order)."""
    return [ReferenceRelease()] + [m() for m in MUTANTS]
