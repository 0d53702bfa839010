"""Own data that does not fit a preset (issue 14): fitting the sizes, errors that name their ``--set`` key,
stability warnings, and the adversarial leftovers (loader record minimums, typed notebook extras, variants
checked up front, dropped table rows counted, contribution widths checked)."""
import csv
import json
import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from pe_kit.audit.trials import check_equal_populations
from pe_kit.data.loaders import Corpus, DataError, User, load_blogs, load_sentiment140, load_yelp
from pe_kit.data.splits import split_users
from pe_kit.run.fit import MIN_MAUVE_SAMPLES, MIN_USERS_PER_SPLIT, DataProfile, fit_preset, stability_warnings
from pe_kit.run.presets import PRESETS, get_preset
from pe_kit.settings import parse_override


def _s140(path, users: int, tweets: int) -> str:
    """A Sentiment140-format CSV (no header, Latin-1, 6 columns) with ``users`` × ``tweets`` distinct rows."""
    rng = np.random.default_rng(0)
    words = ["rain", "coffee", "late", "bus", "happy", "work", "movie", "friday", "tired", "café", "game", "lunch"]
    with open(path, "w", encoding="latin-1", newline="") as fh:
        w = csv.writer(fh)
        for u in range(users):
            for t in range(tweets):
                text = " ".join(rng.choice(words, 6)) + f" #{u}-{t}"
                w.writerow(["4" if t % 2 else "0", f"{u}{t}", "Mon Apr 06 22:19:45 PDT 2009", "NO_QUERY", f"user{u}",
                            text])
    return str(path)


def _profile(counts, cap=64) -> DataProfile:
    return DataProfile("own.csv", "sentiment140", np.minimum(np.asarray(counts), cap), cap)


# ------------------------------------------------------------------------------------------------ loaders
def test_loader_record_minimums_follow_the_cap(tmp_path):
    path = _s140(tmp_path / "s.csv", 3, 10)
    assert len(load_sentiment140(path).users) == 0  # paper arm at m = 64: 32–64 tweets; 10 is too few
    c = load_sentiment140(path, record_cap=16)  # m/2 = 8 ≤ 10: admitted (was: min 32 fixed, nobody)
    assert len(c.users) == 3 and all(len(u.texts) == 10 for u in c.users)
    c = load_sentiment140(path, record_cap=8)
    assert len(c.users) == 3 and all(len(u.texts) == 8 for u in c.users)
    yelp = tmp_path / "yelp.json"
    yelp.write_text("".join(f'{{"user_id": "u{u}", "text": "review {u} {t}", "stars": 4}}\n'
                            for u in range(3) for t in range(u + 3)))  # 3, 4, 5 reviews
    assert len(load_yelp(yelp).users) == 0  # exactly 64 by default
    assert [len(u.texts) for u in load_yelp(yelp, record_cap=4).users] == [4, 4]  # min = cap = 4 (was 64)
    with pytest.raises(ValueError, match="min_records=8 exceeds record_cap=4"):
        load_yelp(yelp, record_cap=4, min_records=8)


def test_data_errors_name_the_on_error_setting(tmp_path):
    bad = tmp_path / "blogs.jsonl"
    bad.write_text('{"user_id": "a", "text": 5, "industry": "x"}\n')
    with pytest.raises(DataError, match="--set on_error=skip"):
        load_blogs(bad)
    assert len(load_blogs(bad, on_error="skip").users) == 0
    assert parse_override("on_error=skip") == ("on_error", "skip")
    with pytest.raises(ValueError, match="on_error"):
        parse_override("on_error=ignore")
    from pe_kit.study.world import StudyConfig

    cfg = StudyConfig(on_error="skip")  # passed to the loader, kept out of cache keys (same world either way)
    assert "on_error" not in cfg.as_dict() and cfg.on_error == "skip"


# ------------------------------------------------------------------------------------------------ splits
def _corpus(n_users: int, records: int) -> Corpus:
    return Corpus([User(f"u{i}", tuple(f"t{i}-{j}" for j in range(records)), "x") for i in range(n_users)], "own.csv")


def test_split_errors_name_the_keys_and_no_unshipped_file():
    with pytest.raises(ValueError) as exc:
        split_users(_corpus(60, 40), 5, 100, 150, 150, canary_records=40)
    msg = str(exc.value)
    for key in ("n_canary=5", "n_aux=100", "n_calibration=150", "n_test=150", "= 405 needed", "--fit-data", "--set"):
        assert key in msg
    assert "blogs.jsonl" not in msg
    with pytest.raises(ValueError, match=r"none with exactly record_cap=64 records.*--set record_cap=40"):
        split_users(_corpus(60, 40), 5, 10, 10, 10, canary_records=64)


# ------------------------------------------------------------------------------------------------ fitting
def test_fit_60_users_x_40_tweets_keeps_the_protocol(tmp_path):
    data = _s140(tmp_path / "own.csv", 2, 2)  # get_preset only checks that the file exists
    p = get_preset("quick", data=data, fmt="sentiment140")
    fit = fit_preset(p, _profile([40] * 60))
    q = fit.preset
    assert fit.fitted and fit.definite
    assert q.record_cap == 40  # canaries need exactly m records: all 60 users have 40
    check_equal_populations(q.n_calibration, q.n_test)  # equal-size distinct calibration / test
    used = q.n_canary + q.n_aux + q.n_calibration + q.n_test
    assert used < 60 and q.n_canary >= 1 and q.n_aux >= 1  # users left over for the public bank
    assert q.bank_size <= (60 - used) * 40 and q.max_probes >= q.record_cap  # exact: r = m probes still fit
    assert q.extra["06_multiround_mauve"]["generator"] == "wordnet"  # public pool too small for 6 rounds
    assert q.extra["06_multiround_mauve"]["max_attempts"] == 20  # WordNet needs more calls on short texts
    assert q.extra["06_multiround_mauve"]["bank_size"] <= q.bank_size
    assert (q.record_cap, q.n_canary, q.n_aux, q.n_calibration, q.bank_size) == (40, 6, 8, 16, 448)
    get_preset(q)  # the fitted preset passes every check of a preset
    assert not fit_preset(q, _profile([40] * 60, cap=40)).fitted  # fitting is idempotent
    text = fit.summary()
    assert "record_cap=40 (was 64)" in text and "n_test=16 (was 290)" in text and "Why:" in text


def test_fit_keeps_user_settings_and_names_them_when_impossible(tmp_path):
    data = _s140(tmp_path / "own.csv", 2, 2)
    p = get_preset("quick", data=data, fmt="sentiment140", overrides={"n_aux": 4})
    q = fit_preset(p, _profile([40] * 60), fixed=["n_aux"]).preset
    assert q.n_aux == 4 and q.n_calibration == q.n_test
    p = get_preset("quick", data=data, fmt="sentiment140", overrides={"n_test": 100, "n_calibration": 100})
    with pytest.raises(ValueError, match=r"n_calibration, n_test"):
        fit_preset(p, _profile([40] * 60), fixed=["n_test", "n_calibration"])


def test_fit_checks_only_the_arms_the_notebooks_read(tmp_path):
    from pe_kit.run.fit import arms_used

    data = _s140(tmp_path / "own.blogs.jsonl", 2, 2)
    p = get_preset("quick", data=data, fmt="blogs", overrides={"arms": ["short"], "arm": "short",
                                                               "sweep_arm": "short"})
    assert arms_used(p, ["04_audit"]) == {"short"} and arms_used(p, ["07_audit_an_implementation"]) == set()
    p = get_preset("quick", data=data, fmt="blogs")  # arms long + short, arm long
    assert arms_used(p, ["01_mechanism", "04_audit"]) == {"long", "short"}
    # 600 bloggers with 64 posts and 2000 with 40: the long arm (755 users needed) is short, the short arm is not
    prof = _profile([64] * 600 + [40] * 2000)
    short = get_preset("quick", data=data, fmt="blogs", overrides={"arm": "short"})
    assert not fit_preset(short, prof, notebooks=["01_mechanism", "03_llr_checks"]).fitted
    assert fit_preset(short, prof, notebooks=["04_audit"]).definite  # 04 reads both arms
    assert not fit_preset(p, _profile([40] * 5), notebooks=["07_audit_an_implementation"]).fitted  # no data read


def test_fit_leaves_a_fitting_preset_alone(tmp_path):
    data = _s140(tmp_path / "own.csv", 2, 2)
    p = get_preset("quick", data=data, fmt="sentiment140")
    fit = fit_preset(p, _profile([64] * 2000))
    assert not fit.fitted and fit.preset is p and "nothing changed" in fit.summary()


def test_stability_warnings_thresholds():
    assert (MIN_USERS_PER_SPLIT, MIN_MAUVE_SAMPLES) == (50, 50)  # benchmarks/small_data_stability.py
    assert stability_warnings(PRESETS["quick"]) == []  # N = 290, MAUVE on ~1,984 samples per side
    w = stability_warnings(PRESETS["tiny"])  # N = 20, q = 0.1: 2 expected voters per round
    assert len(w) == 2 and f"< {MIN_USERS_PER_SPLIT}" in w[0] and "q·N = 2.0 expected voters" in w[1]
    assert stability_warnings(PRESETS["quick"].with_values({"n_calibration": 50, "n_test": 50})) == []
    small = PRESETS["tiny"].with_values({"06.bank_size": 60})  # 60 − r=16 = 44 per side
    assert any(f"~44 samples per side (< {MIN_MAUVE_SAMPLES}" in x for x in stability_warnings(small))
    # a run without notebook 06 (e.g. --notebooks 08) is not warned about 06's voters per round or MAUVE samples
    only08 = stability_warnings(small, notebooks=["08_one_run_audit"])
    assert len(only08) == 1 and f"< {MIN_USERS_PER_SPLIT}" in only08[0] and "notebook 06" not in only08[0]
    assert len(stability_warnings(small, notebooks=["06_multiround_mauve", "08_one_run_audit"])) == 3


def test_cli_refuses_small_data_naming_keys_and_fit_option(tmp_path, capsys):
    from pe_kit.run.cli import main

    data = _s140(tmp_path / "own.csv", 60, 6)
    rc = main(["reproduce", "--data", data, "--format", "sentiment140", "--results-dir", str(tmp_path / "r"),
               "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "--fit-data" in err and "--set record_cap=6" in err and "--set n_aux=" in err
    assert not (tmp_path / "r").exists()  # refused before any notebook


# ------------------------------------------------------------------------------------------------ leftovers
def test_notebook_extras_are_type_checked():
    assert parse_override("08.one_run_qs=0.1") == ("08_one_run_audit.one_run_qs", [0.1])
    assert parse_override("07.suite_trials=1e4") == ("07_audit_an_implementation.suite_trials", 10_000)
    for bad in ("07.suite_trials=1.5", "07.ladder=0", "08.one_run_variants=exact", "08.probe_shares=2",
                "08.idealised_repeats=true"):
        with pytest.raises(ValueError, match="--set"):
            parse_override(bad)


def test_unknown_variant_is_refused_before_any_notebook(tmp_path, capsys):
    from pe_kit.run.cli import main

    rc = main(["reproduce", "--preset", "tiny", "--set", "variants=ordinary,typo", "--results-dir",
               str(tmp_path / "r"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "--set variants=ordinary,typo: variants[1]='typo' is not accepted: use 'all' or one of" in err
    assert not (tmp_path / "r").exists()


def test_variant_tables_count_dropped_rows():
    from pe_kit.report.results import summary_markdown, table_epsilon, table_epsilon_spread

    df = pd.DataFrame({"study_arm": ["long"] * 4, "bank_source": ["bankA", "bankA", np.nan, "bankA"],
                       "variant": ["ordinary", "nonce", "nonce", "made-up"], "epsilon_lower": [0.1, 0.5, 0.9, 2.0],
                       "epsilon_theory": [1.7] * 4, "experiment": ["table2"] * 4, "mu_eff": [0.1] * 4,
                       "mu_eff_ceiling": [1.0] * 4, "trials": [100] * 4})
    with pytest.warns(UserWarning, match="2 of 4 audit rows"):
        t = table_epsilon(df)
    assert t.attrs["dropped_rows"] == {"missing_bank_source": 1, "unknown_variant": 1}
    assert float(t.loc[("long", "bankA"), "nonce"]) == 0.5  # the NaN-bank row's 0.9 is not in a cell
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert table_epsilon_spread(df).attrs["dropped_rows"] == {"missing_bank_source": 1, "unknown_variant": 1}
        md = summary_markdown(df)
    assert "2 audit row(s) are not in this table: 1 with missing bank source, 1 with unknown variant" in md


def test_audit_canary_checks_contribution_widths():
    from pe_kit.audit.canary import _audit_canary
    from pe_kit.settings import AuditConfig, MechanismConfig

    rng = np.random.default_rng(0)
    good = sp.csr_matrix(rng.random((6, 8)))
    with pytest.raises(ValueError, match=r"p=8 columns.*calibration 7"):
        _audit_canary(np.ones(8), np.arange(3), good, sp.csr_matrix(rng.random((6, 7))), good, MechanismConfig(),
                     AuditConfig(trials=100), rng)
    with pytest.raises(ValueError, match=r"coords must lie in \[0, p=8\)"):
        _audit_canary(np.ones(8), np.array([2, 8]), good, good, good, MechanismConfig(), AuditConfig(trials=100), rng)


def test_public_bank_error_names_the_keys():
    from pe_kit.data.splits import split_users
    from pe_kit.text.banks import make_bank

    corpus = _corpus(10, 4)
    splits = split_users(corpus, 1, 2, 3, 3, canary_records=4)  # 1 public user: 4 records
    with pytest.raises(ValueError, match=r"--set bank_size=4\).*--fit-data"):
        make_bank("public", 16, np.random.default_rng(0), corpus=corpus, splits=splits)


def test_splits_that_take_every_user_leave_no_public_bank_and_stop_the_run():
    """Sizes that use every user of the arm leave nobody for the public bank: a certain misfit (the run stops before
    any notebook, naming the fix), not the estimated one that only warns."""
    from pe_kit.run.fit import _needs

    p = get_preset("tiny", {"banks": ["bankA", "public"]}, None, None)
    used = p.n_canary + p.n_aux + p.n_calibration + p.n_test
    prof = _profile([p.record_cap] * used, cap=p.record_cap)
    found = _needs(p, prof, {"long"})
    assert [d for _, d in found] == [True] and "drop the public bank (--set banks=bankA" in found[0][0]
    assert fit_preset(p, prof).definite
    assert _needs(get_preset("tiny", {"banks": ["bankA"], "bank": "bankA"}, None, None), prof, {"long"}) == []


def test_terminal_names_cells_with_skipped_canaries(tmp_path):
    """After a notebook, the run names each Table 2 cell that audited fewer canaries than asked (a skipped design),
    so the terminal says what results.md's counts show; the committed paper parts have none."""
    from pathlib import Path

    from pe_kit.report.results import short_cells

    rows = [{"experiment": "table2", "study_arm": "long", "study_bank": "bankA", "variant": v, "canary_id": f"{v}{j}"}
            for v, n in (("exact", 2), ("paraphrase-mu_eff", 1)) for j in range(n)]
    path = tmp_path / "04_audit.csv"
    pd.DataFrame(rows + [{"experiment": "sweep", "variant": "nonce"}]).to_csv(path, index=False)
    assert short_cells(path, 2) == ["long/bankA paraphrase-mu_eff: 1 of 2 canaries audited (the others were skipped: "
                                    "see the executed notebook's warnings)"]
    assert short_cells(path, 1) == [] and short_cells(tmp_path / "absent.csv", 2) == []
    committed = Path(__file__).resolve().parents[1] / "docs" / "paper_run"
    assert short_cells(committed / "long" / "results.csv", 5) == short_cells(committed / "short" / "results.csv", 5) == []


def test_fit_counts_bank_b_authors_out_of_the_private_splits(tmp_path, monkeypatch):
    """A bank-B world keeps bank B's example authors out of every split (study.world.bank_reserved_users), so the fit
    must not count them as users a split can take: 755 users with 40 records fit quick's short arm (25 + 150 + 290 +
    290 = 755) exactly, and the same data with 10 of them reserved is definitely too small."""
    from pe_kit.data import loaders
    from pe_kit.data.passes import Scan
    from pe_kit.run.fit import reserved_for

    data = _s140(tmp_path / "own.blogs.jsonl", 2, 2)
    short = {"arms": ["short"], "arm": "short", "sweep_arm": "short", "banks": ["bankA"], "bank": "bankA"}
    p = get_preset("quick", data=data, fmt="blogs", overrides=short)
    q = get_preset("quick", data=data, fmt="blogs", overrides={**short, "banks": ["bankA", "bankB"]})
    counts = [64] * 755
    assert not fit_preset(p, _profile(counts), notebooks=["04_audit"]).fitted
    scan = Scan("own", "blogs", {f"u{i}": c for i, c in enumerate(counts)}, None, None)
    reserved = {f"u{i}" for i in range(10)} | {"not-in-data"}
    prof = DataProfile("own", "blogs", scan.records_per_user(64), 64, scan.reserved_records(reserved, 64))
    assert prof.reserved.tolist() == [64] * 10                     # the id absent from the data is not counted
    assert (prof.arm_users("short", 64), prof.canary_users(64)) == (745, 745)
    fit = fit_preset(q, prof, notebooks=["04_audit"])
    assert fit.definite and "755 > 745 users" in fit.reasons[0]
    # which presets reserve: bank B named in banks or bank, and only when its file is shipped
    monkeypatch.setattr(loaders, "default_bank_b_path", lambda partial=False: tmp_path / "absent.jsonl.gz")
    assert reserved_for(q) == frozenset() and reserved_for(p) == frozenset()
    path = tmp_path / "b.jsonl"
    path.write_text(json.dumps({"text": "a", "examples": [["u1", 0], ["u2", 3]]}) + "\n")
    monkeypatch.setattr(loaders, "default_bank_b_path", lambda partial=False: path)
    assert reserved_for(q) == {"u1", "u2"} and reserved_for(p) == frozenset()


def test_reserved_for_follows_each_notebooks_own_bank(tmp_path, monkeypatch):
    from pe_kit.data import loaders
    from pe_kit.run.fit import reserved_for

    path = tmp_path / "b.jsonl"
    path.write_text(json.dumps({"text": "a", "examples": [["u1", 0]]}) + "\n")
    monkeypatch.setattr(loaders, "default_bank_b_path", lambda partial=False: path)
    data = _s140(tmp_path / "own.csv", 2, 2)
    q = get_preset("quick", data=data, fmt="sentiment140", overrides={"03_llr_checks.bank": "bankB"})
    assert reserved_for(q) == reserved_for(q, ["03_llr_checks"]) == {"u1"}
    r = get_preset("quick", data=data, fmt="sentiment140", overrides={"banks": ["bankA", "bankB"]})
    assert reserved_for(r, ["01_mechanism"]) == frozenset() and reserved_for(r, ["04_audit"]) == {"u1"}
