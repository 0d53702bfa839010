"""One-run audits (issue 16) under inputs real users give: out-of-range sample rates, probe budgets too small for
one canary, near-equal probe budgets, notebook 08's published-check parameters, and malformed guesser inputs. Each
test pins an error that names the field and the fix, or the correct numbers."""
import sys
from pathlib import Path

import numpy as np
import pytest

from pe_kit.audit.one_run import abstaining_guesses, fdp_rejects, idealised_scores, mu_lower_fdp, one_run_audit

sys.path.insert(0, str(Path(__file__).parent))


def _scores(m=200, mu=1.0, q=1.0, seed=0):
    return idealised_scores(mu, q, m, np.random.default_rng(seed))


@pytest.mark.parametrize("q", [0.0, 1.5, -0.1, float("nan"), float("inf")])
def test_one_run_audit_rejects_a_sample_rate_outside_0_1(q):
    # before: q = 0 and 1.5 raised "math domain error"; q = NaN returned ε_lower = 0 for the f-DP bound silently
    s, inc = _scores()
    with pytest.raises(ValueError, match="sample_rate"):
        one_run_audit(s, inc, delta=1e-5, sample_rate=q)
    with pytest.raises(ValueError, match="sample_rate"):
        fdp_rejects(200, 100, 80, np.array([0.5]), 0.05, sample_rate=q)
    with pytest.raises(ValueError, match="sample_rate"):
        mu_lower_fdp(200, 100, 80, 0.05, sample_rate=q)


def test_one_run_audit_sample_rate_one_as_int_or_numpy_float_is_q_equal_one():
    # q = 1 exactly, as int 1, numpy float32 1.0 or a float a hair below 1: the same μ-GDP bound (continuity)
    s, inc = _scores()
    ref = one_run_audit(s, inc, delta=1e-5, sample_rate=1.0)["fdp"].epsilon_lower
    assert ref > 0
    for q in (1, np.float32(1.0)):
        assert one_run_audit(s, inc, delta=1e-5, sample_rate=q)["fdp"].epsilon_lower == ref
    assert one_run_audit(s, inc, delta=1e-5, sample_rate=1 - 1e-7)["fdp"].epsilon_lower == pytest.approx(ref, rel=1e-3)
