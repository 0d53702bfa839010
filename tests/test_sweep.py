"""Dask sweeps (pe_kit.audit.sweep): rebuilding the scalar problem for a new (σ, q), task products and seeds,
and Dask == serial for the same seeds."""
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from pe_kit.audit.moments import aux_moments, llr_weights, mu_eff, null_moments
from pe_kit.audit.sweep import (
    AuditTask,
    CanaryInputs,
    run_sweep,
    run_task,
    scalar_problems,
    sweep_tasks,
)
from pe_kit.audit.trials import nonce_problem, scalar_problem
from pe_kit.config import MechanismConfig


def _inputs(seed=0, p=12, n_aux=60, n_cal=50, n_test=50, labels=None) -> CanaryInputs:
    rng = np.random.default_rng(seed)

    def pop(n):
        return sp.random(n, p, density=0.2, random_state=rng, format="csr") * 0.03

    v = np.full(p, 0.1 / np.sqrt(p))
    return CanaryInputs(v, pop(n_aux), pop(n_cal), pop(n_test), labels or {"variant": "toy", "canary_id": seed})


def test_scalar_problems_rebuild_for_new_sigma_and_q():
    inp = _inputs()
    for sigma, q in ((1.0, 0.1), (0.5, 0.3)):
        cal, test, info = scalar_problems(inp, sigma, q)
        mech = MechanismConfig(noise_multiplier=sigma, sample_rate=q)
        m0, cov = null_moments(aux_moments(inp.aux), inp.test.shape[0], mech)
        w = llr_weights(inp.canary, cov)
        ref = scalar_problem(w, inp.test, inp.canary, m0, mech.noise_std, q)
        np.testing.assert_allclose(test.projections, ref.projections)
        assert test.canary_shift == pytest.approx(ref.canary_shift) and test.noise_sd == pytest.approx(ref.noise_sd)
        assert info["mu_eff"] == pytest.approx(mu_eff(inp.canary, cov)) and info["mu_eff"] <= 1 / sigma
        assert cal.n_users == test.n_users == 50 and cal.sample_rate == q
    lo, _, _ = scalar_problems(inp, 2.0, 0.1)
    hi, _, _ = scalar_problems(inp, 0.5, 0.1)
    assert lo.canary_shift < hi.canary_shift  # more noise → less separation
    with pytest.raises(ValueError, match="n_calibration=40 but n_test=50"):  # never resampled
        scalar_problems(_inputs(n_cal=40), 1.0, 0.1)
    with pytest.raises(ValueError, match="columns"):
        CanaryInputs(np.ones(3), sp.csr_matrix((2, 4)), sp.csr_matrix((2, 3)), sp.csr_matrix((2, 3)))


def test_sweep_tasks_product_labels_and_seeds():
    tasks = sweep_tasks([_inputs(0), _inputs(1)], [0.5, 1.0], [0.05, 0.1], [1000, 5000], seed=4, with_theory=False)
    assert len(tasks) == 2 * 2 * 2 * 2
    assert len({t.seed for t in tasks}) == len(tasks)
    labels = [dict(t.labels) for t in tasks]
    assert {lab["sigma"] for lab in labels} == {0.5, 1.0} and {lab["variant"] for lab in labels} == {"toy"}
    t = tasks[0]
    assert dict(t.labels)["trials_requested"] == t.trials == 1000 and np.isnan(t.epsilon_theory)
    (one,) = sweep_tasks([_inputs(0)], [1.0], [0.1], [1000])
    assert one.epsilon_theory == pytest.approx(1.695, abs=0.003)  # Opacus PRV, design.md
    with pytest.raises(ValueError, match="CanaryInputs"):
        sweep_tasks(["nope"], [1.0], [0.1], [10])


def test_run_task_row_values():
    row = run_task(AuditTask(nonce_problem(1.0, 0.1), nonce_problem(1.0, 0.1), trials=200_000, seed=(0, 1),
                             epsilon_theory=1.695, labels=(("variant", "nonce"),),
                             options=(("method", "multinomial"),)))
    assert row["variant"] == "nonce" and row["mu_eff"] == pytest.approx(1.0) and row["background_voters"] == 0
    assert 0.2 < row["epsilon_lower"] <= 1.695 and row["test_n_h0"] == 200_000
    assert "seconds" not in row and "seconds" in run_task(AuditTask(nonce_problem(1.0, 0.1), nonce_problem(1.0, 0.1),
                                                                    trials=100, seed=0), timing=True)


def test_dask_sweep_equals_serial_sweep():
    """A LocalCluster of 2 workers returns exactly the serial table for the same seeds."""
    tasks = sweep_tasks([_inputs(0), _inputs(1, labels={"variant": "other", "canary_id": 1})], [0.7, 1.0], [0.1],
                        [20_000], seed=7, with_theory=False)
    tasks.append(AuditTask(nonce_problem(1.0, 0.1), nonce_problem(1.0, 0.1), trials=50_000, seed=(7, 99),
                           labels=(("variant", "nonce"),)))
    serial = run_sweep(tasks, "serial")
    dask = run_sweep(tasks, None, n_workers=2, processes=False)
    pd.testing.assert_frame_equal(serial, dask)
    assert list(serial.task) == list(range(len(tasks)))
    assert (serial.epsilon_lower >= 0).all() and serial.epsilon_lower.max() > 0
    assert (serial.epsilon_lower <= 1.695).all()  # ε_theory at σ = 1 (σ = 0.7 allows more)
    assert set(serial.method) == {"groups", "multinomial"}  # auto: exact counts for the nonce task (no background)
    with pytest.raises(ValueError, match="scheduler"):
        run_sweep(tasks[:1], 42)
    with pytest.raises(ValueError, match="AuditTask"):
        run_sweep([1], "serial")
