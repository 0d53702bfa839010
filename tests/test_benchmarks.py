"""Every script in benchmarks/ runs at tiny sizes (``--smoke``, benchmarks/_smoke.py) and prints its figures.

Each test runs one script as a subprocess (HF_HUB_OFFLINE=1, the session's PE_KIT_CACHE) and parses the labelled
numbers the script exists to print, checking them against what any run must give (ranges, identities, the
paper's ε_theory = 1.695 at σ = 1, q = 0.1, δ = 1e-5), not just its exit code. The unmarked tests take about a
minute together on 2 cores; scripts that build a world, start Dask or load a language model are ``slow``.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
NUM = r"([-+]?\d[\d,]*\.?\d*(?:e[-+]?\d+)?)"
EPS_THEORY = 1.695  # σ = 1, q = 0.1, δ = 1e-5 (accounting.epsilon_theory)


def run(script: str, *args: str, timeout: int = 900) -> str:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "PE_KIT_PROGRESS": "off"}
    out = subprocess.run([sys.executable, str(BENCH / script), "--smoke", *args], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{script} --smoke exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def numbers(pattern: str, text: str) -> list[float]:
    """Every match of ``pattern`` (its NUM groups) in ``text`` as floats; at least one match required."""
    hits = re.findall(pattern, text)
    assert hits, f"no line matches {pattern!r} in:\n{text[-3000:]}"
    return [float(str(h).replace(",", "")) if not isinstance(h, tuple) else tuple(float(x.replace(",", "")) for x in h)
            for h in hits]


def table(text: str) -> list[list[str]]:
    """The data rows of the markdown table(s) in ``text``: those whose first cell is a number."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.startswith("|")]
    return [r for r in rows if re.fullmatch(NUM, r[0])]


SMOKED = {  # every benchmark script and the test that runs it
    "bench_trials.py": "test_bench_trials", "bench_threshold_rule.py": "test_bench_threshold_rule",
    "one_run_reference.py": "test_one_run_reference", "one_run_fdp_gap.py": "test_one_run_fdp_gap",
    "bench_blackbox.py": "test_bench_blackbox", "bench_selection.py": "test_bench_selection",
    "bench_release_dask.py": "test_bench_release_dask", "bench_embedding.py": "test_bench_embedding",
    "bench_speed.py": "test_bench_speed", "bench_generation.py": "test_bench_generation",
    "bench_paraphrase_batching.py": "test_bench_paraphrase_batching",
    "small_data_stability.py": "test_small_data_stability", "table2_bundled.py": "test_table2_bundled",
    "fidelity_mu_eff.py": "test_fidelity_mu_eff", "shared_population.py": "test_shared_population",
    "composed_reference.py": "test_composed_reference", "bench_big_corpus.py": "test_bench_big_corpus",
    "reproduce_under_load.py": "test_reproduce_under_load", "bank_b_copying.py": "test_bank_b_copying",
    "real_pe.py": "test_real_pe", "real_pe_augpe.py": "test_real_pe_augpe",
}


def test_every_benchmark_script_has_a_smoke_test():
    scripts = {p.name for p in BENCH.glob("*.py") if not p.name.startswith("_")}
    assert scripts == set(SMOKED), f"untested: {sorted(scripts - set(SMOKED))}; gone: {sorted(set(SMOKED) - scripts)}"
    assert all(callable(globals().get(t)) for t in SMOKED.values())
    shared = {"battery_args"}  # real_pe.py's options, parsed with _smoke.parse_args, shared by the real-PE scripts
    for p in BENCH.glob("*.py"):
        if not p.name.startswith("_"):
            text = p.read_text()
            assert "_smoke import" in text or any(f"{f}(" in text for f in shared), \
                f"{p.name} does not take --smoke (benchmarks/_smoke.py)"


def test_bench_trials():
    out = run("bench_trials.py", "--workers", "1")
    ratio, speedup = numbers(r"kit / limit = " + NUM + r" \(target ≥ 0\.9\) \| kit / untiled previous loop = " + NUM,
                             out)[0]
    assert 0.2 < ratio < 5 and 0.2 < speedup < 10
    assert numbers(r"method='auto' resolves to 'multinomial', " + NUM + "× the per-trial 'sample' path", out)[0] >= 0
    fast_full = numbers(r"fast/full ratio .*?: " + NUM + "× wall", out)
    assert len(fast_full) == 2 and all(r > 1 for r in fast_full)
    nonce_mib, natural_mib = numbers(r"passes: nonce " + NUM + r" MiB, natural " + NUM + " MiB", out)[0]
    assert 0 < nonce_mib < 200 and 0 < natural_mib < 200
    assert numbers(r"μ_eff = " + NUM + ", grid", out) == [1.0, pytest.approx(0.668, abs=0.01)]


def test_bench_threshold_rule(tmp_path):
    csv_path = tmp_path / "audits.csv"
    out = run("bench_threshold_rule.py", "--save", str(csv_path))
    assert numbers(r"eps_theory=" + NUM, out) == [EPS_THEORY]
    rows = table(out)
    assert [(r[0], r[1]) for r in rows] == [(mu, rule) for mu in ("1", "0") for rule in
                                           ("argmax", "gaussian_model", "anchored_argmax", "penalised", "min_count",
                                            "oracle")][:11]
    for mu, rule, median, mean, sd, zeros, above, fell_back, ms, audits in rows:
        assert int(audits) == 10 and int(above) == 0 and 0 <= float(median) < EPS_THEORY
        if mu == "0":  # a null canary: nothing to find, every audit at exactly 0, the default rule falls back
            assert (float(median), int(zeros)) == (0.0, 10) and int(fell_back) == (10 if rule == "gaussian_model" else 0)
        else:
            assert 0.2 < float(median) < 1.0
    pooled = subprocess.run([sys.executable, str(BENCH / "bench_threshold_rule.py"), "--combine", str(csv_path)],
                            cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    # the CSV gives back every column of the printed table but the timing
    strip = [r[:8] + r[9:] for r in rows]
    assert [r[:8] + r[9:] for r in table(pooled.stdout)] == strip
    again = subprocess.run([sys.executable, str(BENCH / "bench_threshold_rule.py"), "--combine", str(csv_path),
                            str(csv_path)], cwd=ROOT, capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert again.returncode != 0 and "appears twice" in again.stderr


def test_one_run_reference():
    out = run("one_run_reference.py")
    rows = re.findall(r"(fdp|steinke)\s+" + NUM + r"\s+" + NUM + r"\s+" + NUM + r"\s+" + NUM, out)
    assert [r[0] for r in rows] == ["fdp", "steinke"]  # (method, median, min, max, ε_theory)
    for med, lo, hi, theory in (map(float, r[1:]) for r in rows):
        assert 0 <= lo <= med <= hi <= theory and theory == pytest.approx(4.387, abs=1e-3)


def test_one_run_fdp_gap():
    out = run("one_run_fdp_gap.py")
    assert numbers(r"σ = 2 \(m = 100,000; published " + NUM, out) == [1.59]
    for label in ("stated", "tau=0.1", "alg4", "bonferroni", "nomax", "pergame_median"):
        (v,) = numbers(r"\n  " + re.escape(label) + r"\s+" + NUM, out)
        assert 0 < v < 1.99  # below σ = 2's ε_theory (Table 1 of the source)


def test_bench_blackbox():
    out = run("bench_blackbox.py")
    assert numbers(r"batched " + NUM + ", one full release per call", out)[0] > 0
    rows = re.findall(r"^(\w+)\s+(concentrated|displacement)\s+(True|False)\s+(True|False)\s+" + NUM + r"\s+" + NUM,
                      out, re.M)
    assert len(rows) == 11 and {r[0] for r in rows} >= {"reference", "no_clipping", "fixed_noise_seed"}
    for impl, _, breaks, flagged, eps, theory in rows:
        assert float(theory) == pytest.approx(0.660, abs=1e-3) and float(eps) >= 0
        if breaks == "False":  # a correct implementation is never flagged
            assert flagged == "False" and float(eps) <= float(theory)
    controls = re.findall(r"^  (\w+)\s+\w+\s+flagged (\d+)/(\d+)", out, re.M)
    assert controls and all(f == "0" and n == "1" for _, f, n in controls)


def test_bench_selection():
    out = run("bench_selection.py")
    norm, mu, cov, dist = numbers(r"greedy norm " + NUM + r" s, greedy μ_eff " + NUM + r" s, Σ̂_Q " + NUM +
                                  r" s, distances " + NUM + " s", out)[0]
    assert all(0 <= x < 60 for x in (norm, mu, cov, dist))  # printed to 2–3 decimals: a fast step reads 0.00
    assert numbers(r"WordNet paraphraser: pool of " + NUM, out)[0] == 96


@pytest.mark.slow
def test_bench_release_dask():
    out = run("bench_release_dask.py")
    assert numbers(r"serial:\s+" + NUM + " releases/s", out)[0] > 0
    assert len(numbers(r"dask, \d worker\(s\):\s+" + NUM, out)) == 2
    assert 0 < numbers(r"parallel efficiency at 2 workers .*?: " + NUM, out)[0] < 2
    assert "identical counts serial vs dask: True" in out
    assert len(numbers(r"ε_lower " + NUM + r" vs ε_theory 0\.66", out)) == 2


@pytest.mark.slow
def test_bench_embedding():
    out = run("bench_embedding.py")
    rates = numbers(r"max_seq_length=\w+:\s+" + NUM + " texts/s", out)
    assert len(rates) == 4 and all(r > 0 for r in rates)
    assert numbers(r"routing against p=8192:\s+" + NUM, out)[0] > 0


@pytest.mark.slow
def test_bench_speed():
    out = run("bench_speed.py", "--skip-generation")
    assert numbers(r"kit / limit = " + NUM, out)[0] > 0  # a ratio, not a target: load moves it (benchmarks/README)
    assert "'passed': True" in out  # the ONNX backend's verification against torch


@pytest.mark.slow
def test_bench_generation():
    out = run("bench_generation.py")
    wordnet = numbers(r"wordnet-v1\s+" + NUM + r"\s+" + NUM + r"\s+" + NUM + r"\s+" + NUM, out)[0]
    assert wordnet[1] == 100 and wordnet[3] > 0  # 2 prompts × 50 repeats, texts/s
    if "smollm2: skipped" not in out:
        assert numbers(r"smollm2: " + NUM + " output tokens", out)[0] > 0


@pytest.mark.slow
def test_bench_paraphrase_batching():
    from pe_kit.text.generators.local_lm import LocalLMGenerator
    from pe_kit.text.generators.base import GenerationError

    try:
        LocalLMGenerator().load()
    except GenerationError as exc:
        pytest.skip(f"SmolLM2 is not installed: {exc}")
    out = run("bench_paraphrase_batching.py")
    assert len(numbers(r"batch=\s*\d+ n=2 .*?\(\s*" + NUM + " texts/s\)", out)) == 2
    assert numbers(r"outputs identical to the first batch size's \(of 2\): \{1: (\d)", out) == [2]


@pytest.mark.slow
def test_small_data_stability():
    out = run("small_data_stability.py")
    mauve = numbers(r"n=\s+50/side\s+mean " + NUM, out)
    assert len(mauve) == 2 and all(0 < m <= 1 for m in mauve)
    med, sd = numbers(r"N=\s+10\s+users redrawn: median " + NUM + r"\s+sd " + NUM, out)[0]
    assert 0 <= med < EPS_THEORY and sd >= 0


@pytest.mark.slow
def test_table2_bundled():
    out = run("table2_bundled.py")
    eps = numbers(r"eps_lower=" + NUM, out)
    assert eps and all(0 <= e <= EPS_THEORY for e in eps)
    assert "trials per hypothesis per split: 2,000" in out


@pytest.mark.slow
def test_fidelity_mu_eff():
    out = run("fidelity_mu_eff.py")
    assert numbers(r"cap 32, p 256: done at \d+ s \(" + NUM + " texts embedded\)", out)[0] > 0
    medians = numbers(r"(?:nonce|ordinary)\s+32\s+256\s+10\s+20\s+" + NUM, out)
    assert len(medians) == 2 and all(0 < m <= 1.0 + 1e-9 for m in medians)  # μ_eff ≤ 1/σ (Eq. 20)


@pytest.mark.slow
def test_shared_population():
    out = run("shared_population.py")
    assert len(re.findall(r"^redraw \d: eps", out, re.M)) == 3
    sd = numbers(r"per-canary sd of ε_lower over redraws \(median over canaries\) \| " + NUM, out)[0]
    assert 0 <= sd < EPS_THEORY


@pytest.mark.slow
def test_composed_reference(tmp_path):
    out = run("composed_reference.py", "--out", str(tmp_path / "c.csv"))
    import pandas as pd

    from pe_kit.audit.bounds import epsilon_lower_from_counts

    rows = pd.read_csv(tmp_path / "c.csv")
    assert set(rows.variant) <= {"composed-mu_eff", "nonce"} and "nonce" in set(rows.variant)
    assert ((rows.mu_eff > 0) & (rows.mu_eff <= 1 + 1e-9)).all()
    for r in rows.itertuples():  # every ε_lower recomputed from the row's own counts, γ and δ (Eqs. 28–30)
        t, f = (r.test_true_pos, r.test_false_pos) if r.test_direction == 1 else (
            r.test_n_h1 - r.test_true_pos, r.test_n_h0 - r.test_false_pos)
        eps, _ = epsilon_lower_from_counts(t, f, r.test_n_h1, r.test_n_h0, r.gamma, r.audit_delta)
        assert eps == pytest.approx(r.epsilon_lower, abs=1e-12)
    assert len(numbers(r"eps_lower " + NUM, out)) == len(rows)


@pytest.mark.slow
def test_bench_big_corpus(tmp_path):
    out = run("bench_big_corpus.py", "--out", str(tmp_path))
    assert numbers(r"file: .*?\(\d\.\d\d GiB, " + NUM + " reviews", out) == [20_000]
    passes = re.findall(r"passes over the file: (\d+)", out)
    assert passes == ["2", "2", "0"]  # a warm cached corpus parses nothing


@pytest.mark.slow
def test_reproduce_under_load():
    out = run("reproduce_under_load.py")
    assert re.search(r"^run 1 \(plain\): PASS", out, re.M)
    assert numbers(r"(\d+) of 1 runs passed", out) == [1]


@pytest.mark.slow
def test_bank_b_copying():
    data = ROOT.parent / "shared" / "data" / "blogs" / "blogs.jsonl.gz"
    from pe_kit.data.loaders import default_bank_b_path

    if not data.is_file() or not default_bank_b_path().is_file():
        pytest.skip(f"needs the full Blog corpus ({data}) and the shipped bank-B file")
    out = run("bank_b_copying.py", "--data", str(data))
    assert numbers(r": " + NUM + " rows", out) == [20]
    own = numbers(r"\| its own three examples \| " + NUM + r" \| " + NUM + "%", out)[0]
    assert own[0] >= 0 and 0 <= own[1] <= 100


def test_committed_threshold_rule_csv_gives_the_documented_table():
    """docs/threshold_rules.csv (every audit of the benchmark) gives back each row of docs/threshold_rules.md's
    tables that it covers, in every column but the timing; e.g. the default rule at μ_eff = 1: 0.995 / 0.092."""
    out = subprocess.run([sys.executable, str(BENCH / "bench_threshold_rule.py"), "--combine",
                          str(ROOT / "docs" / "threshold_rules.csv")], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True).stdout
    doc = {tuple(r[:2]): r[:8] + r[9:] for r in table((ROOT / "docs" / "threshold_rules.md").read_text())
           if len(r) == 10}
    rows = table(out)
    assert len(rows) == 35 and {r[0] for r in rows} == {"2", "1.5", "1", "0.75", "0.5", "0"}
    for r in rows:
        assert r[:8] + r[9:] == doc[tuple(r[:2])], r
    assert ["1", "gaussian_model", "0.995", "0.992", "0.092", "0", "0", "15"] in [r[:8] for r in rows]


@pytest.mark.slow
def test_real_pe():
    dpsda = Path(os.environ.get("PE_KIT_DPSDA", "/tmp/dpsda"))
    if not (dpsda / "pe").is_dir():
        pytest.skip(f"needs a checkout of microsoft/DPSDA at {dpsda} (PE_KIT_DPSDA; docs/real_pe.md)")
    import importlib.util

    missing = [m for m in ("omegaconf", "generalimport") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"DPSDA's dependencies {missing} are not installed (docs/real_pe.md)")
    out = run("real_pe.py", "--dpsda", str(dpsda))
    assert re.search(r"^microsoft/DPSDA @ [0-9a-f]{40}; battery of \d+ designs", out, re.M)


@pytest.mark.slow
def test_real_pe_augpe():
    augpe = Path(os.environ.get("PE_KIT_AUGPE", "/tmp/augpe"))
    deps = Path(os.environ.get("PE_KIT_AUGPE_DEPS", "/tmp/augpe-deps"))
    if not ((augpe / ".git").exists() and (augpe / "dpsda" / "dp_counter.py").is_file()):
        pytest.skip(f"needs a git checkout of AI-secure/aug-pe at {augpe} (PE_KIT_AUGPE; docs/real_pe.md)")
    import importlib.util

    if importlib.util.find_spec("faiss") is None and not (deps / "faiss").is_dir():
        pytest.skip(f"faiss-cpu is neither installed nor in {deps} (PE_KIT_AUGPE_DEPS; docs/real_pe.md)")
    out = run("real_pe_augpe.py", "--augpe", str(augpe), "--deps", str(deps))
    assert re.search(r"^AI-secure/aug-pe @ [0-9a-f]{40}; batteries of \d+ \(sample\) and \d+ \(user\) designs", out,
                     re.M)
    # the two-stage form gives the one-call form's releases, seed for seed
    assert re.search(r"counts identical: True \(\d+, \d+, \d+, \d+\); max \|score difference\| " + NUM, out)
    assert numbers(r"max \|score difference\| " + NUM, out)[0] < 1e-12
    lower = dict(re.findall(r"^augpe_(sample|user): flagged=\w+ epsilon_lower=" + NUM
                            + r" epsilon_theory=3\.15 designs=\d+", out, re.M))
    assert set(lower) == {"sample", "user"}
    assert float(lower["user"]) > float(lower["sample"])  # 16 records per user: separable even at smoke size

