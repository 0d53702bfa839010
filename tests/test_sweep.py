"""Audit sweeps (pe_kit.audit.sweep): one task's row, and a sweep returns its tasks' rows in order, reproducibly."""
import numpy as np
import pandas as pd
import pytest

from pe_kit.audit.sweep import AuditTask, run_sweep, run_task
from pe_kit.audit.trials import nonce_problem


def test_run_task_row_values():
    row = run_task(AuditTask(nonce_problem(1.0, 0.1), nonce_problem(1.0, 0.1), trials=200_000, seed=(0, 1),
                             epsilon_theory=1.695, labels=(("variant", "nonce"),),
                             options=(("method", "multinomial"),)))
    assert row["variant"] == "nonce" and row["mu_eff"] == pytest.approx(1.0) and row["background_voters"] == 0
    assert 0.2 < row["epsilon_lower"] <= 1.695 and row["test_n_h0"] == 200_000
    assert "seconds" not in row and "seconds" in run_task(AuditTask(nonce_problem(1.0, 0.1), nonce_problem(1.0, 0.1),
                                                                    trials=100, seed=0), timing=True)


def test_sweep_rows_are_the_tasks_rows_in_order_and_reproducible():
    tasks = [AuditTask(nonce_problem(mu, 0.1), nonce_problem(mu, 0.1), trials=50_000, seed=(7, i),
                       labels=(("mu", mu),)) for i, mu in enumerate((0.5, 1.0))]
    df = run_sweep(tasks)
    assert list(df.task) == [0, 1] and list(df["mu"]) == [0.5, 1.0]
    assert df.epsilon_lower.iloc[0] == run_task(tasks[0])["epsilon_lower"]
    pd.testing.assert_frame_equal(df, run_sweep(tasks))
    assert (df.epsilon_lower >= 0).all() and df.epsilon_lower.iloc[1] > df.epsilon_lower.iloc[0]
    assert (df.epsilon_lower <= 1.695).all() and np.all(df.method == "multinomial")
    with pytest.raises(ValueError, match="AuditTask"):
        run_sweep([1])
