"""Issue 31: real-text black-box designs, the design battery, checks of the implementation itself, Dask fan-out.

The implementations audited are ``tests/release_bugs.py``: plain functions written from the paper (a correct one,
harmless variants, and the bugs that escaped a single design)."""
import warnings
from pathlib import Path

import numpy as np
import pytest

from pe_kit.attack.bug_canaries import concentrated_design
from pe_kit.attack.design_battery import battery_designs, check_design, with_large_bank
from pe_kit.attack.release_designs import release_design
from pe_kit.audit.accounting import epsilon_theory
from pe_kit.audit.battery import audit_battery, battery_gamma, design_claim
from pe_kit.audit.blackbox import DEFAULT_DELTA, audit_implementation, spec_statistic
from pe_kit.audit.bounds import epsilon_lower_from_counts
from pe_kit.audit.plan import audit_reach
from pe_kit.audit.release_checks import batch_call_check, repeat_check, seed_check
from pe_kit.settings import AuditConfig, MechanismConfig
from pe_kit.pe.release_protocol import ReferenceRelease
from pe_kit.study.release_audit import audit_release, release_battery
from steps.implementation_audit import SUITE_DELTA
from tests import release_bugs as B

MECH = MechanismConfig()  # k=5, C=0.1, σ=1, q=0.1, m=64
SMALL = {"n_aux": 10, "n_calibration": 10, "n_test": 10, "bank_size": 48}


@pytest.fixture(scope="module")
def tiny_battery(tiny_world):
    """The battery of a nonce canary on the tiny real-text world (25 users, p = 1024; 16 probes from 64 nonces)."""
    return release_battery(tiny_world, variant="nonce", mechanism=MECH, seed=0,
                           design_options={"pool_size": 64, "r": 16})


# ------------------------------------------------------------------------------------------ defaults and messages

def test_defaults_names_and_errors_say_what_was_expected():
    d = concentrated_design(np.random.default_rng(0), **SMALL)
    assert DEFAULT_DELTA == SUITE_DELTA == 1e-3
    a = audit_implementation(B.reference_fn, d, MECH, trials=200, seed=0)
    assert a.delta == 1e-3 and a.info["implementation"] == "reference_fn" and not a.info["batched"]
    with pytest.raises(TypeError, match="swap release and design"):
        audit_implementation(d, B.reference_fn, MECH, trials=10)
    with pytest.raises(TypeError, match="MechanismConfig"):
        audit_implementation(B.reference_fn, d, {"top_k": 5}, trials=10)

    def forgot_return(bank, records, owner, n_users, config, rng):
        bank.sum()

    with pytest.raises(ValueError, match=r"forgot_return.*returned None.*shape \(48,\).*return"):
        audit_implementation(forgot_return, d, MECH, trials=10)

    def nan_release(bank, records, owner, n_users, config, rng):
        return np.full(bank.shape[0], np.nan)

    with pytest.raises(ValueError, match=r"nan_release.*48 non-finite values"):
        audit_implementation(nan_release, d, MECH, trials=10)


# ------------------------------------------------------------------------------------------ implementation checks

def test_seed_check_catches_clock_and_import_seeds_and_passes_the_reference():
    d = concentrated_design(np.random.default_rng(1), **SMALL)
    for impl in (B.reference_fn, ReferenceRelease(), B.BatchDiffersFromCall()):
        c = seed_check(impl, d, MECH)
        assert c == {"seed_same_release": True, "seed_different_release": True, "seed_flag": False}, impl
    assert seed_check(B.import_seeded, d, MECH)["seed_same_release"] is False
    clock = seed_check(B.clock_seeded, d, MECH)  # 1 s resolution: one of the two fails whatever the timing
    assert clock["seed_flag"] and not (clock["seed_same_release"] and clock["seed_different_release"])


def test_batch_call_check_on_a_synthetic_design():
    d = check_design(concentrated_design(np.random.default_rng(2), **SMALL), MECH)
    stat = spec_statistic(d, MECH)
    ok = batch_call_check(ReferenceRelease(), d, MECH, stat, n_call=1_500, gamma=1e-3, seed=0)
    bad = batch_call_check(B.BatchDiffersFromCall(), d, MECH, stat, n_call=1_500, gamma=1e-3, seed=0)
    assert not ok["batch_call_flag"] and ok["batch_call_pvalue"] > 1e-3
    assert bad["batch_call_flag"] and bad["batch_call_pvalue"] < 1e-6
    assert np.isnan(batch_call_check(B.reference_fn, d, MECH, stat)["batch_call_pvalue"])  # no batched form
    assert battery_gamma(0.05, 7, ReferenceRelease()) == pytest.approx(0.05 / 30)  # batched and per-call forms
    assert battery_gamma(0.05, [d] * 7, B.reference_fn) == pytest.approx(0.05 / 29)  # one form: no batch-vs-call test


def test_repeat_check_allows_post_processing_and_flags_stale_or_missing_noise():
    """Clamping, rounding to 3 dp, a float16 cast and a count threshold keep DP (post-processing): never flagged over
    20 seeds each, although the threshold repeats the all-zero release hundreds of times; a constant or clock seed,
    the fixed-seed mutant and an empty batch returned without noise repeat far beyond what the output allows."""
    from pe_kit.pe.mutants import FixedNoiseSeed

    from pe_kit.attack.design_battery import with_canary_records, with_population

    big = check_design(concentrated_design(np.random.default_rng(2), **SMALL), MECH)  # 1 other user, p = 8,192
    d = with_population(with_canary_records(concentrated_design(np.random.default_rng(2), **SMALL), 1, MECH), 1)
    gamma = battery_gamma(0.05, 7, ReferenceRelease())
    for impl in (ReferenceRelease(),) + B.POST_PROCESSED:
        runs = [repeat_check(impl, d, MECH, gamma=gamma, seed=s) for s in range(20)]
        assert not any(r["repeat_flag"] for r in runs), (impl, runs)
        assert min(r["repeat_pvalue"] for r in runs) > 0.01
    thr = repeat_check(B.count_threshold, d, MECH, gamma=gamma, seed=0)
    assert thr["repeat_largest"] > 100 and thr["repeat_allowed"] > 0.5  # the all-zero release, as often as allowed
    for impl in (B.constant_seeded, B.clock_seeded, B.empty_batch_zeros, FixedNoiseSeed(), B.noise_first_4096):
        r = repeat_check(impl, big, MECH, gamma=gamma, seed=0)
        assert r["repeat_flag"] and r["repeat_pvalue"] < 1e-30, (impl, r)
    with pytest.raises(ValueError, match="n_releases=1 is out of range: use an integer ≥ 2"):
        repeat_check(B.reference_fn, d, MECH, n_releases=1)


# ------------------------------------------------------------------------------------------ designs

def test_release_design_is_the_studys_statistic_and_the_battery_varies_one_axis(tiny_world, tiny_battery):
    from pe_kit.study.world import audit_design, make_design

    probe = make_design(tiny_world, "exact", 0, np.random.default_rng(1))
    row = audit_design(tiny_world, probe, MECH, AuditConfig(trials=500), np.random.default_rng(0))
    b = release_design(tiny_world, probe, MECH)
    s = spec_statistic(b, MECH)
    assert s.mu_eff == pytest.approx(row["mu_eff"], rel=1e-12)  # the same Eqs. 14, 31–35 on the same users
    big = with_large_bank(b, 8192)
    assert big.bank.shape[0] == 8192 and big.coords.min() == 8192 - 16
    assert spec_statistic(big, MECH).mu_eff == pytest.approx(s.mu_eff, rel=1e-9)  # nobody routes to the padding

    designs, check = tiny_battery
    axes = {d.info.get("axis"): d for d in designs[1:]}
    settings = [(d.info["axis"], d.info["setting"]) for d in designs[1:]]
    assert settings == [("position", "first"), ("position", "random"), ("records", "1"), ("records", "cap"),
                        ("population", "1"), ("population", "100"), ("bank", "8192"),
                        ("sensitivity", "q=1")]  # median = 16 records: skipped
    base = designs[0]
    assert base.canary_position == "last" and len(base.test) == 25 and len(base.canary) == 16
    assert designs[1].canary_position == "first" and 0 <= designs[2].canary_position <= 25
    assert [len(d.canary) for d in designs[3:5]] == [1, 64] and [len(d.test) for d in designs[5:7]] == [1, 100]
    assert (designs[4].canary == designs[3].canary).all()  # cap: m copies of the 1-record canary's record
    assert spec_statistic(designs[4], MECH).mu_eff == pytest.approx(spec_statistic(designs[3], MECH).mu_eff)
    sens = designs[8]  # the 1-record canary, audited with every user sampled at δ = 0.1
    assert (sens.canary == designs[3].canary).all() and sens.info["claim"] == {"sample_rate": 1.0, "delta": 0.1}
    up = designs[6]  # each split's 25 users repeated 4 times, the splits still disjoint
    assert [id(u) for u in up.test] == [id(u) for u in base.test] * 4 and len(up.calibration) == 100
    assert not {id(u) for u in up.calibration} & {id(u) for u in up.test}
    assert len(check.test) == 1 and len(check.canary) == 1
    with pytest.raises(ValueError, match=r"n_users='x0' must be an integer ≥ 1 or 'x<f>'"):
        battery_designs(base, MECH, np.random.default_rng(0), axes={"population": ("x0",)})


# ------------------------------------------------------------------------------------------ Dask

def test_dask_fan_out_gives_the_serial_counts():
    from distributed import Client, LocalCluster

    d = concentrated_design(np.random.default_rng(3), **SMALL)
    serial = [audit_implementation(r, d, MECH, trials=300, seed=4, call_chunk=50) for r in (B.reference_fn,
                                                                                            ReferenceRelease())]
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        fanned = [audit_implementation(r, d, MECH, trials=300, seed=4, call_chunk=50, scheduler=client)
                  for r in (B.reference_fn, ReferenceRelease())]
    for a, b in zip(serial, fanned):
        assert (a.calibration.columns(), a.columns()) == (b.calibration.columns(), b.columns())
        assert a.epsilon_lower == b.epsilon_lower and a.threshold == b.threshold


# ------------------------------------------------------------------------------------------ must show

@pytest.mark.slow
def test_battery_flags_each_escaped_bug_and_not_the_reference(tiny_world, tiny_battery):
    """Real text (bundled tiny Blogs, nonce canary): every escaped bug of issue 31 is flagged, where the issue says
    it hides; the reference and the harmless variants are not."""
    where = {"first_user_always": "position=first", "heavy_users_skip_sampling": "records=cap",
             "empty_batch_zeros": "repeated releases", "noise_first_4096": "none on some coordinates", "clock_seeded": "seed not honoured",
             "import_seeded": "seed not honoured: same seed", "batch_differs_from_call": "release_batch ≠"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for impl in B.ESCAPED:
            impl = impl() if isinstance(impl, type) else impl
            r = audit_release(impl, tiny_world, mechanism=MECH, trials=1_500, designs=tiny_battery, check_calls=1_000)
            assert r.flagged, (r.implementation, r.rows)
            assert any(where[r.implementation] in x for x in r.reasons), (r.implementation, r.reasons)
        for impl in (ReferenceRelease(),) + B.HARMLESS:
            r = audit_release(impl, tiny_world, mechanism=MECH, trials=1_500, designs=tiny_battery, check_calls=1_000)
            assert not r.flagged, (r.implementation, r.reasons)
            assert r.epsilon_lower <= r.epsilon_theory


@pytest.mark.slow
def test_noise_that_shrinks_with_the_sampled_users_is_flagged_by_the_population_up_design(tiny_battery):
    """The README's budget (2,000 trials, α = 0.05): noise std σC/√(#sampled) breaks the guarantee at N = 25 already
    (derived), but at the claimed q only the 100-user design, where about 10 users are sampled, shows it."""
    from pe_kit.pe.mutants import NoiseShrinksWithUsers

    designs, check = tiny_battery
    a = audit_battery(NoiseShrinksWithUsers(), designs, MECH, trials=2_000, seed=0, check=check, check_calls=300)
    up = next(r for r in a.rows if r["setting"] == "100")
    assert a.flagged and up["violation"] and up["epsilon_lower"] > a.epsilon_theory, a.reasons
    at_claim = [r["setting"] for r in a.rows if r["violation"] and r["mech_sample_rate"] == MECH.sample_rate]
    assert at_claim == ["100"] and up["expected_violation"]
    # with every user sampled (the sensitivity design, q = 1) the noise is σC/√25 whenever the canary is in: flagged too
    assert next(r for r in a.rows if r["setting"] == "q=1")["violation"]
    assert NoiseShrinksWithUsers().breaks_guarantee(MechanismConfig(sample_rate=1.0), 26)
    assert a.gamma == pytest.approx(0.05 / (4 * 9 + 2))


@pytest.mark.slow
def test_clipping_at_2c_and_record_level_sampling_are_flagged_by_the_designs_aimed_at_them(tiny_battery):
    """The README's budget (2,000 trials, α = 0.05): clipping to 2C doubles the 1-record canary's contribution (its
    h̄ has norm 1/√5 > 2C), which the sensitivity design (q = 1, δ = 0.1) shows; records sampled instead of users let
    the cap design's 64 equal records in w.p. 1 − 0.9⁶⁴ ≈ 1 instead of 0.1 (both derived in pe.mutants)."""
    from pe_kit.pe.mutants import ClipAtTwiceC, RecordLevelSampling

    designs, check = tiny_battery
    for impl, aimed in ((ClipAtTwiceC(), "q=1"), (RecordLevelSampling(), "cap")):
        assert impl.breaks_guarantee(MECH, 26)
        a = audit_battery(impl, designs, MECH, trials=2_000, seed=0, check=check, check_calls=300)
        row = next(r for r in a.rows if r["setting"] == aimed)
        assert a.flagged and row["violation"] and row["epsilon_lower"] > row["epsilon_theory"], a.reasons
        assert any(r.startswith(row["design"] + ":") for r in a.reasons)
    sens = next(r for r in a.rows if r["setting"] == "q=1")
    assert sens["mech_sample_rate"] == 1.0 and sens["delta"] == 0.1 and sens["epsilon_theory"] == pytest.approx(
        epsilon_theory(1.0, 1.0, 0.1))


def test_the_new_mutants_derive_when_they_break_the_guarantee():
    """ClipAtTwiceC breaks iff clipping binds (C < 1/√k); RecordLevelSampling iff q < 1 and m ≥ 2 (pe.mutants); the
    batched RecordLevelSampling is a per-release loop over mechanism.contributions of the sampled records."""
    from pe_kit.pe.mechanism import contributions, topk_routes
    from pe_kit.pe.mutants import ClipAtTwiceC, RecordLevelSampling

    assert ClipAtTwiceC().breaks_guarantee(MECH, 2) and not ClipAtTwiceC().breaks_guarantee(
        MechanismConfig(clip_norm=0.5, top_k=5), 2)  # 0.5 ≥ 1/√5: no vote vector reaches C
    rl = RecordLevelSampling()
    assert rl.breaks_guarantee(MECH, 2) and not rl.breaks_guarantee(MechanismConfig(record_cap=1), 2)
    assert not rl.breaks_guarantee(MechanismConfig(sample_rate=1.0), 2)
    g = np.random.default_rng(0)
    bank, records = g.normal(size=(40, 4)).astype(np.float32), g.normal(size=(30, 4)).astype(np.float32)
    owner, mech = np.sort(g.integers(0, 6, 30)), MechanismConfig(clip_norm=0.15, sample_rate=0.4, top_k=3)
    y = rl.release_batch(bank, records, owner, 7, mech, np.random.default_rng(5), 50, np.arange(40))
    g, routes = np.random.default_rng(5), topk_routes(records, bank, 3)
    loop = np.stack([np.asarray(contributions(routes[m], owner[m], 7, 40, 0.15).sum(axis=0)).ravel()
                     for m in g.random((50, 30)) < 0.4])
    np.testing.assert_allclose(y, loop + g.normal(0.0, mech.noise_std, (50, 40)), rtol=0, atol=1e-12)


def test_audit_release_and_audit_battery_use_one_gamma(tiny_world, capsys):
    """audit_release announces the reach at the γ audit_battery then uses: that of the battery as built (the median
    design coincides with the base's 16 records and is audited once: 2 designs, not the 3 the axes name)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = audit_release(ReferenceRelease(), tiny_world, mechanism=MECH, trials=50, seed=0, check_calls=20,
                          axes={"records": ("median", 1)}, design_options={"pool_size": 64, "r": 16})
    assert len(r.rows) == 2 and r.gamma == battery_gamma(0.05, 2, ReferenceRelease()) == 0.05 / 10
    assert r.reach.line() in capsys.readouterr().err.splitlines()


@pytest.mark.slow
def test_battery_family_wise_false_alarms_at_most_alpha(tiny_battery):
    """20 independent re-audits each of the reference and of a correct release clamped at 0 (post-processing) on the
    tiny real-text battery at the tests' smallest budget: at most α·20 = 1 of each is flagged (measured: 0 and 0)."""
    class Clamped(ReferenceRelease):
        name = "clamped"

        def noise(self, totals, coords, bank_size, config, rng):
            return np.maximum(super().noise(totals, coords, bank_size, config, rng), 0.0)

    designs, check = tiny_battery
    stats = [spec_statistic(d, design_claim(d, MECH, DEFAULT_DELTA)[0]) for d in designs]
    for impl in (ReferenceRelease(), Clamped()):
        flags, eps = 0, []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for r in range(20):
                a = audit_battery(impl, designs, MECH, trials=1_000, alpha=0.05, seed=[31, r], check=check,
                                  check_calls=300, stats=stats, show_progress=False)
                flags += int(a.flagged)
                eps.append(a.epsilon_lower)
        assert flags <= 1, (impl, flags)
        assert max(eps) < a.epsilon_theory


def test_per_call_releases_show_progress(monkeypatch, capsys):
    """An implementation without release_batch gets one progress step per stream (plain lines when headless)."""
    monkeypatch.setenv("PE_KIT_HEADLESS", "1")
    monkeypatch.delenv("PE_KIT_PROGRESS", raising=False)
    d = concentrated_design(np.random.default_rng(5), **SMALL)
    audit_implementation(B.reference_fn, d, MECH, trials=100, seed=0)
    err = capsys.readouterr().err
    for split in ("calibration", "test"):
        for h in (0, 1):
            assert f"reference_fn {split} H{h}: 100/100 release" in err, err
    audit_implementation(ReferenceRelease(), d, MECH, trials=100, seed=0)
    assert "release" not in capsys.readouterr().err  # the batched form is fast: no bar


def test_audit_release_refuses_what_is_not_data():
    with pytest.raises(TypeError, match="world_or_data must be a corpus path"):
        audit_release(B.reference_fn, 42)
    with pytest.raises(TypeError, match="release must be a PERelease"):
        audit_release("not a function", None)


def test_reference_prepare_routes_once_and_follows_in_place_changes():
    d = concentrated_design(np.random.default_rng(6), **SMALL)
    from pe_kit.pe.release_protocol import stack_users

    rec, owner, n = stack_users(d.test)
    bank = np.array(d.bank)
    ref = ReferenceRelease()
    c1 = ref.prepare(bank, rec, owner, n, MECH)
    assert ref.prepare(bank, rec, owner, n, MECH) is c1  # same inputs: the routing is reused
    bank[d.coords] = bank[d.coords][::-1] + 50.0  # changed in place: recomputed, equal to a fresh pipeline's
    c3 = ref.prepare(bank, rec, owner, n, MECH)
    assert c3 is not c1 and (c3 != ReferenceRelease().prepare(bank, rec, owner, n, MECH)).nnz == 0
    assert ref.prepare(bank, rec, owner, n, MechanismConfig(clip_norm=0.2)) is not c3


def test_battery_outcome_is_the_public_result_of_its_worst_design():
    d = concentrated_design(np.random.default_rng(7), **SMALL)
    designs = battery_designs(d, MECH, np.random.default_rng(0), axes={"position": ("first",)})
    from pe_kit.pe.mutants import CanaryAlwaysIncluded

    a = audit_battery(B.first_user_always, designs, MECH, trials=2_000, seed=0)
    o = a.outcome()
    assert a.flagged and a.violation and o.method == "threshold"
    assert o.epsilon_lower == a.epsilon_lower > a.epsilon_theory == o.epsilon_theory
    assert o.row["design"].endswith("position=first") and o.row["battery_flagged"] is True
    assert o.settings["mech_sample_rate"] == 0.1 and o.counts["n_h0"] == 2_000
    # the kit's own mutant that exempts the *last* user is caught on the base design, not on position=first
    b = audit_battery(CanaryAlwaysIncluded(), designs, MECH, trials=2_000, seed=0)
    assert [r["violation"] for r in b.rows] == [True, False]


def test_audit_release_takes_the_record_cap_from_the_mechanism():
    """MechanismConfig(record_cap=16) caps the study's records, as audit_mechanism does: the tiny corpus (16 posts per
    blogger) builds a world instead of failing on the default m = 64; an empty arm says it is empty and how to fix it."""
    from pe_kit.settings import MechanismConfig
    from pe_kit.study.release_audit import release_battery

    tiny = str(Path(__file__).parent / "data" / "blogs-tiny.jsonl.gz")
    study = dict(n_canary=5, n_aux=20, n_calibration=25, n_test=25, bank_size=1024, max_probes=16, max_seq_length=32)
    designs, _ = release_battery(tiny, mechanism=MechanismConfig(record_cap=16), study=study, axes={})
    assert designs[0].canary.shape[0] == 16 and all(len(u) <= 16 for u in designs[0].test)  # m = 16 records
    with pytest.raises(ValueError, match="holds no users|none with exactly record_cap=64"):
        release_battery(tiny, mechanism=MechanismConfig(record_cap=64), study=study, axes={})


def test_the_battery_headline_is_at_the_claim_and_a_refusal_of_q1_comes_before_the_world():
    """The sensitivity design runs at q = 1, δ = 0.1, where a correct release's ε_lower (larger δ) may exceed the
    claim's ε_theory: the headline ε_lower and ``outcome()`` stay at the claim; a release that refuses q = 1 fails
    in the dry call, before any world, naming the way out."""
    d = concentrated_design(np.random.default_rng(7), **SMALL)
    designs = battery_designs(d, MECH, np.random.default_rng(0), axes={"sensitivity": ("q=1",)})
    a = audit_battery(ReferenceRelease(), designs, MECH, trials=1_000, seed=0, show_progress=False)
    o = a.outcome()
    assert not a.flagged and [r["at_claim"] for r in a.rows] == [True, False]
    assert o.info["at_claim"] and o.epsilon_theory == a.epsilon_theory == pytest.approx(0.660, abs=1e-3)
    assert o.epsilon_lower == a.epsilon_lower == a.audits[0].epsilon_lower

    def strict(bank, records, owner, n_users, config, rng):
        if not 0 < config.sample_rate < 1:
            raise ValueError(f"sample_rate={config.sample_rate} must lie in (0, 1)")
        return B.reference_fn(bank, records, owner, n_users, config, rng)

    with pytest.raises(ValueError, match=r"sample_rate=1.0 must lie in \(0, 1\)") as exc:
        audit_release(strict, "no/such/corpus.jsonl", mechanism=MECH)  # a world would fail on the path: this comes first
    assert "axes without 'sensitivity'" in "".join(getattr(exc.value, "__notes__", []))


# ------------------------------------------------------------------------------------------ early stop (looks)

def test_looks_double_the_trials_and_split_gamma_exactly():
    """Looks at ⌈T/4⌉, ⌈T/2⌉, T; each look's bounds at γ/L (Bonferroni over the looks); refused before any work
    when a look would add no trial."""
    from pe_kit.audit.blackbox import look_sizes

    assert look_sizes(2_000, 3) == [500, 1_000, 2_000] and look_sizes(2_001, 3) == [501, 1_001, 2_001]
    assert look_sizes(7, 3) == [2, 4, 7] and look_sizes(4, 3) == [1, 2, 4] and look_sizes(5) == [5]
    with pytest.raises(ValueError, match=r"^looks=3 must be an integer ≥ 1 with 2\^\(looks − 1\) ≤ trials=3 "):
        look_sizes(3, 3)
    with pytest.raises(ValueError, match=r"^looks=0 is out of range: use an integer ≥ 1$"):
        audit_release(ReferenceRelease(), None, trials=2_000, looks=0)  # before the world is built
    with pytest.raises(ValueError, match=r"^looks=2\.5 is not an integer ≥ 1 \(no fractional part allowed: use 2 or 3\)$"):
        audit_battery(ReferenceRelease(), [concentrated_design(np.random.default_rng(0), **SMALL)], MECH, looks=2.5)
    d = concentrated_design(np.random.default_rng(0), n_aux=20, n_calibration=25, n_test=25, bank_size=64)
    a = audit_implementation(ReferenceRelease(), d, MECH, trials=8_000, gamma=0.05, seed=2, looks=3,
                             show_progress=False)
    assert a.gamma == a.info["gamma"] == 0.05 / 3 and a.info["reach"] == audit_reach(MECH, 8_000, gamma=0.05 / 3,
                                                                                     delta=DEFAULT_DELTA).reach
    one = audit_implementation(ReferenceRelease(), d, MECH, trials=8_000, gamma=0.05, seed=2, show_progress=False)
    assert (one.gamma, one.info["looks"], one.info["looks_run"], one.info["releases"]) == (0.05, 1, 1, 32_000)


def test_a_reference_release_runs_every_look_and_its_last_bound_is_the_closed_form_at_gamma_over_looks():
    """Unflagged, the reference draws all 4T releases; its ε_lower (> 0 here) is Eq. 28 on the last look's counts at
    γ/3, with the threshold calibrated on all T calibration trials and never on the test trials."""
    d = concentrated_design(np.random.default_rng(0), n_aux=20, n_calibration=25, n_test=25, bank_size=64)
    a, scores = audit_implementation(ReferenceRelease(), d, MECH, trials=8_000, gamma=0.05, seed=2, looks=3,
                                     show_progress=False, return_scores=True)
    assert not a.violation and (a.info["looks"], a.info["looks_run"], a.info["releases"]) == (3, 3, 32_000)
    assert a.n_h1 == a.n_h0 == a.calibration.n_h1 == a.calibration.n_h0 == 8_000
    assert {k: v.size for k, v in scores.items()} == {(s, h): 8_000 for s in ("calibration", "test") for h in (0, 1)}
    assert a.epsilon_lower > 0.2 and a.epsilon_lower == epsilon_lower_from_counts(
        a.true_pos, a.false_pos, a.n_h1, a.n_h0, 0.05 / 3, DEFAULT_DELTA)[0]
    assert a.direction == 1 and a.threshold == a.calibration.threshold  # frozen on the calibration trials
    assert (a.true_pos, a.false_pos) == tuple(int(np.sum(scores[("test", h)] > a.threshold)) for h in (1, 0))


def test_a_flagged_mutant_stops_at_the_first_look_with_a_quarter_of_the_releases():
    """The canary that skips Poisson sampling is flagged at T/4 = 1,000 trials at γ/3: 4,000 releases instead of
    16,000, recorded in the battery's row."""
    from pe_kit.pe.mutants import CanaryAlwaysIncluded

    d = concentrated_design(np.random.default_rng(0), n_aux=20, n_calibration=25, n_test=25, bank_size=64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        b = audit_battery(CanaryAlwaysIncluded(), [d], MECH, trials=4_000, seed=0, looks=3, check_calls=50,
                          repeat_calls=50, show_progress=False)
    row, gamma = b.rows[0], battery_gamma(0.05, 1, CanaryAlwaysIncluded())
    assert b.flagged and row["violation"] and (row["looks_run"], row["releases"]) == (1, 4_000)
    assert row["test_n_h1"] == row["calibration_n_h1"] == 1_000 and row["gamma"] == gamma / 3
    assert row["epsilon_lower"] == epsilon_lower_from_counts(row["test_true_pos"], row["test_false_pos"], 1_000, 1_000,
                                                             gamma / 3, DEFAULT_DELTA)[0] > row["epsilon_theory"]
