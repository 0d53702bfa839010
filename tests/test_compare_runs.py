"""scripts/compare_runs.py: the refactor check finds a changed number and ignores wall times."""
from __future__ import annotations

import pandas as pd
from compare_runs import differences


def test_a_changed_number_is_named_and_wall_times_are_ignored():
    before = pd.DataFrame({"variant": ["nonce", "exact"], "epsilon_lower": [1.049, 0.371], "seconds": [3.0, 4.0]})
    after = before.assign(seconds=[9.0, 1.0])
    assert differences(before, after) == ([], 1)
    after.loc[1, "epsilon_lower"] = 0.372
    assert differences(before, after)[0] == ["row 1, column epsilon_lower: 0.371 → 0.372"]
    assert differences(before, after.iloc[:1])[0] == ["row count 2 → 1"]
