"""The two-stage release form (snapshot → randomise): equal to the one-call form seed for seed, one deterministic
stage per batch, the stage check's verdicts, and audits through either form giving the same counts."""
import numpy as np
import pytest

from pe_kit.attack.bug_canaries import concentrated_design
from pe_kit.audit.battery import audit_battery
from pe_kit.audit.blackbox import audit_implementation
from pe_kit.audit.release_checks import stage_check
from pe_kit.audit.release_runner import CALL_CHUNK
from pe_kit.settings import MechanismConfig
from pe_kit.pe import mutants
from pe_kit.pe.release_protocol import HistogramAdapter, ReferenceRelease, staged, staged_batch, stack_users
from steps.implementation_audit import SUITE_DELTA, SUITE_MECHANISM

MECH = SUITE_MECHANISM
#: DPSDA's setting: client-level normalisation to norm 1 (C = 1), no user sampling (q = 1), noise std σ
CLIENT = MechanismConfig(noise_multiplier=1.0, sample_rate=1.0, top_k=3, clip_norm=1.0, record_cap=8)


def _design(seed=4):
    return concentrated_design(np.random.default_rng(seed), n_aux=10, n_calibration=10, n_test=10, bank_size=32)


def client_votes(private, synthetic, *, k, clip, owner, **_):
    """DPSDA-style deterministic stage: each client's top-k vote counts scaled to norm ``clip``, summed."""
    d = ((private[:, None, :] - synthetic[None, :, :]) ** 2).sum(-1)
    votes = np.zeros((owner.max() + 1, len(synthetic)))
    np.add.at(votes, (np.repeat(owner, k), np.argsort(d, axis=1, kind="stable")[:, :k].ravel()), 1.0)
    return (clip * votes / np.linalg.norm(votes, axis=1, keepdims=True)).sum(0)


def global_noise(clean, *, noise_multiplier, clip, **_):
    """DPSDA-style randomised stage: Gaussian noise from NumPy's global RNG."""
    return clean + np.random.normal(scale=noise_multiplier * clip, size=len(clean))


calls = {"n": 0}


def counted_votes(private, synthetic, **kw):
    calls["n"] += 1
    return client_votes(private, synthetic, **kw)


def two_stage(fn=client_votes):
    return HistogramAdapter(fn, noise_fn=global_noise, per_user=False, rng_arg=None, seed_arg=None, global_seed=True,
                            settings={"top_k": "k", "clip_norm": "clip", "noise_multiplier": "noise_multiplier"},
                            name="client_votes")


def test_staged_releases_equal_one_call_releases_seed_for_seed_with_one_deterministic_stage():
    d = _design()
    records, owner, n = stack_users(d.test)
    adapter = two_stage(counted_votes)
    assert staged(adapter) and not staged(HistogramAdapter(client_votes)) and "two-stage" in repr(adapter)
    calls["n"] = 0
    batch = adapter.release_batch(d.bank, records, owner, n, CLIENT, np.random.default_rng(7), 50, d.coords)
    assert calls["n"] == 1  # the routing ran once for 50 releases
    rng = np.random.default_rng(7)
    one = np.stack([adapter(d.bank, records, owner, n, CLIENT, rng)[d.coords] for _ in range(50)])
    assert calls["n"] == 51
    np.testing.assert_array_equal(batch, one)
    # the reference pipeline: its one-call form is randomise(snapshot(...)), the release it always drew
    ref, p = ReferenceRelease(), d.bank.shape[0]
    y = ref(d.bank, records, owner, n, MECH, np.random.default_rng(3))
    np.testing.assert_array_equal(y, ref.release_batch(d.bank, records, owner, n, MECH, np.random.default_rng(3), 1,
                                                       np.arange(p))[0])
    np.testing.assert_array_equal(staged_batch(ref, d.bank, records, owner, n, MECH, np.random.default_rng(3), 1,
                                               np.arange(p))[0], y)


class _Reordered(ReferenceRelease):
    """Two stages that are not the one-call form: the one-call form draws the noise before the participation."""

    name = "reordered"

    def __call__(self, bank, records, owner, n_users, config, rng):
        noise = rng.normal(0.0, config.noise_std, size=np.asarray(bank).shape[0])
        mask = rng.random(n_users) < config.sample_rate
        return mask.astype(float) @ self.snapshot(bank, records, owner, n_users, config).toarray() + noise


def _reads_global_rng(private, synthetic, **kw):
    return client_votes(private, synthetic, **kw) + np.random.random()


def test_stage_check_passes_correct_stages_and_flags_a_nondeterministic_or_unequal_stage():
    d = _design()
    for release in (two_stage(), ReferenceRelease(), mutants.NoClipping()):
        assert stage_check(release, d, CLIENT) == {"stage_deterministic": True, "stage_equal_calls": 8,
                                                   "stage_calls": 8, "stage_flag": False}
    state = np.random.get_state()
    assert stage_check(two_stage(_reads_global_rng), d, CLIENT, n_calls=2)["stage_deterministic"] is False
    assert np.array_equal(np.random.get_state()[1], state[1])  # the caller's global RNG is restored
    assert stage_check(_Reordered(), d, MECH) == {"stage_deterministic": True, "stage_equal_calls": 0,
                                                  "stage_calls": 8, "stage_flag": True}
    assert stage_check(HistogramAdapter(client_votes, per_user=False), d, CLIENT)["stage_calls"] == 0
    with pytest.raises(ValueError, match="n_calls=0 is out of range: use an integer ≥ 1"):
        stage_check(two_stage(), d, CLIENT, n_calls=0)
    with pytest.raises(ValueError, match="noise_fn must be callable or None, got int"):
        HistogramAdapter(client_votes, noise_fn=3)


def test_audit_through_two_stages_gives_the_one_call_counts():
    d = _design()
    kw = dict(trials=300, gamma=0.0025, delta=SUITE_DELTA, seed=5)
    one = audit_implementation(two_stage(), d, CLIENT, use_batch=False, **kw)
    two = audit_implementation(two_stage(), d, CLIENT, batch=CALL_CHUNK, **kw)  # the one-call chunks: same streams
    assert two.info["batched"] and not one.info["batched"]
    assert (two.true_pos, two.false_pos, two.calibration.true_pos) == \
           (one.true_pos, one.false_pos, one.calibration.true_pos)
    assert two.epsilon_lower == one.epsilon_lower and not two.violation


def test_battery_reports_the_stage_check_and_flags_unequal_stages():
    d = _design()
    ok = audit_battery(two_stage(), [d], CLIENT, trials=300, check_calls=50, seed=0, show_progress=False)
    assert ok.checks["stage_flag"] is False and ok.checks["stage_equal_calls"] == 8 and not ok.flagged
    bad = audit_battery(_Reordered(), [d], MECH, trials=300, check_calls=50, seed=0, show_progress=False)
    assert "two stages ≠ one call: snapshot deterministic = True, 0 of 8 staged releases equal the one-call form" \
        in bad.reasons
