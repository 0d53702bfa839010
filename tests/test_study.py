"""End to end on real data: the tiny Blogs world → ordinary and nonce designs → ε_lower rows."""
import numpy as np
import pytest

from pe_kit.settings import AuditConfig, MechanismConfig
from pe_kit.study.world import audit_design, make_design

MECH = MechanismConfig(record_cap=16)


def test_ordinary_and_nonce_rows(tiny_world):
    audit = AuditConfig(trials=50_000)
    rng = np.random.default_rng(0)
    ordinary = audit_design(tiny_world, make_design(tiny_world, "ordinary", 0, rng), MECH, audit, rng)
    nonce = audit_design(tiny_world, make_design(tiny_world, "nonce", 0, rng), MECH, audit, rng)
    for row in (ordinary, nonce):
        assert 0.0 <= row["epsilon_lower"] <= row["epsilon_theory"]
        assert row["epsilon_theory"] == pytest.approx(1.695, abs=0.003)
        assert row["mu_eff"] <= row["mu_eff_ceiling"] + 1e-9
        assert row["canary_norm"] <= MECH.clip_norm + 1e-12
        assert row["version_numpy"] and row["mech_noise_multiplier"] == 1.0 and row["audit_trials"] == 50_000
    assert nonce["n_coords"] == 64 and nonce["canary_votes_on_P"] == pytest.approx(1.0)  # all nonce votes land on probes
    assert nonce["mu_eff"] > 0.95 and nonce["canary_norm"] == pytest.approx(0.1)
    assert ordinary["canary_votes_on_P"] == pytest.approx(1.0) and ordinary["n_coords"] > 16  # its natural support


def test_same_seed_same_row(tiny_world):
    audit = AuditConfig(trials=2000)
    rows = []
    for _ in range(2):
        rng = np.random.default_rng(5)
        rows.append(audit_design(tiny_world, make_design(tiny_world, "nonce", 0, rng), MECH, audit, rng))
    assert rows[0]["epsilon_lower"] == rows[1]["epsilon_lower"] and rows[0]["canary_id"] == rows[1]["canary_id"]


def test_calibration_and_test_are_distinct_users_of_equal_size_never_resampled(tiny_world, monkeypatch):
    """Issue 11: the threshold is calibrated on N distinct calibration users and evaluated on N distinct test users,
    disjoint from each other and from aux and canaries; audit_design hands the audit exactly those users' rows."""
    import pe_kit.study.world as study
    from pe_kit.study.world import StudyConfig

    s = tiny_world.splits
    cal, test = list(s.calibration), list(s.test)
    assert len(cal) == len(test) == 25 and len(set(cal)) == 25 and len(set(test)) == 25
    assert not set(cal) & set(test) and not (set(cal) | set(test)) & (set(s.aux) | set(s.canary))
    for split, ids in (("calibration", cal), ("test", test)):
        rec = tiny_world.records[split]
        assert rec["ids"] == ids and set(rec["owner"].tolist()) == set(range(25))  # one row block per user
    seen = {}

    def spy(v_full, coords, aux, calibration, test_, mechanism, audit, rng):
        seen.update(calibration=calibration, test=test_)
        return real(v_full, coords, aux, calibration, test_, mechanism, audit, rng)

    real = study._audit_canary
    monkeypatch.setattr(study, "_audit_canary", spy)
    rng = np.random.default_rng(0)
    design = make_design(tiny_world, "ordinary", 0, rng)
    row = audit_design(tiny_world, design, MECH, AuditConfig(trials=2000), rng)
    for split in ("calibration", "test"):
        want = tiny_world.contributions(split, MECH, design)
        assert seen[split].shape == (25, tiny_world.bank.shape[0]) and (seen[split] != want).nnz == 0
    assert row["study_n_calibration"] == row["study_n_test"] == 25
    assert row["calibration_n_h0"] == row["test_n_h0"] == 2000
    with pytest.raises(ValueError, match=r"n_calibration=20 but n_test=25"):
        StudyConfig(n_calibration=20, n_test=25)
