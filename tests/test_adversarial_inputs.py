"""Inputs a real user has that used to give wrong numbers silently (found by an adversarial pass)."""
import json

import numpy as np
import pytest

from pe_kit.audit.accounting import epsilon_ceiling
from pe_kit.audit.bounds import evaluate_threshold, population_shift
from pe_kit.audit.trials import check_equal_populations
from pe_kit.data.loaders import DataError, load_blogs


def test_loader_refuses_non_string_text_and_empty_user_ids(tmp_path):
    rows = [{"user_id": "a", "text": "fine post", "industry": "x"},
            {"user_id": "a", "text": ["a list", "of parts"], "industry": "x"},
            {"user_id": "", "text": "orphan", "industry": "x"}]
    f = tmp_path / "b.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(DataError, match=r"line 2: field 'text' is a list"):
        load_blogs(f, record_cap=4)
    corpus = load_blogs(f, record_cap=4, on_error="skip")
    assert [u.texts for u in corpus.users] == [("fine post",)]  # never "['a list', 'of parts']"


def test_population_shift_needs_one_frozen_event():
    rng = np.random.default_rng(0)
    h0, h1 = rng.normal(0, 1, 1000), rng.normal(1, 1, 1000)
    up = evaluate_threshold(h0, h1, 0.5, 0.0025, 1e-5)
    down = evaluate_threshold(h0, h1, 0.5, 0.0025, 1e-5, direction=-1)
    with pytest.raises(ValueError, match="direction"):
        population_shift(up, down, 0.0025)


def test_equal_population_check_refuses_non_integers():
    for bad in ((10.7, 10), ("10", 10), (0, 0), (True, True)):
        with pytest.raises(ValueError, match="integer"):
            check_equal_populations(*bad)
    check_equal_populations(np.int64(25), 25)


def test_epsilon_ceiling_is_never_negative_at_tiny_mu_eff():
    assert epsilon_ceiling(1e-4, 0.1, 1e-5) >= 0.0


def test_set_data_means_the_same_as_the_data_flag(tmp_path):
    """--set data=… --set fmt=yelp gets Yelp's arm and the public bank, as --data … --format yelp does."""
    from pe_kit.run.presets import get_preset

    f = tmp_path / "reviews.json"
    f.write_text("{}\n")
    a = get_preset("tiny", overrides={"data": str(f), "fmt": "yelp"})
    b = get_preset("tiny", data=str(f), fmt="yelp")
    assert (a.arms, a.banks, a.fmt, a.data) == (b.arms, b.banks, b.fmt, b.data) == (("long",), ("public",), "yelp", str(f))
