"""How far a ``pe-kit reproduce`` run is and how long is left (:func:`run_plan`, :class:`RunClock`), and where it
ran (:func:`machine_info`, ``run.json``'s ``machine``). A notebook reused from its done-marker counts on neither side.
"""
from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import Callable, Mapping, Sequence

__all__ = ["REFERENCE_SECONDS", "PROFILES", "RunClock", "machine_info", "format_duration", "notebook_worlds",
           "embedding_plan", "listed_line", "run_plan", "warm_profile", "REFERENCE_RATE", "PROFILE_LOAD", "load_factor"]

#: seconds per notebook of a measured run of each preset (docs/presets.md names the runs): the cold profiles' ratios
#: weigh the ETA without a plan; a warm profile's seconds are the plan's work besides embedding (:func:`run_plan`)
REFERENCE_SECONDS = {
    "quick": {"01_mechanism": 654.0, "02_probe_design": 161.0, "03_llr_checks": 42.0, "04_audit": 860.0,
              "05_ablations": 123.0, "06_multiround_mauve": 64.0, "07_audit_an_implementation": 22.0,
              "08_one_run_audit": 172.0},
    "quick-warm": {"01_mechanism": 34.0, "02_probe_design": 42.0, "03_llr_checks": 36.0, "04_audit": 346.0,
                   "05_ablations": 175.0, "06_multiround_mauve": 83.0, "07_audit_an_implementation": 34.0,
                   "08_one_run_audit": 192.0},
    "tiny-warm": {"01_mechanism": 36.0, "02_probe_design": 46.0, "03_llr_checks": 41.0, "04_audit": 137.0,
                  "05_ablations": 92.0, "06_multiround_mauve": 43.0, "07_audit_an_implementation": 63.0,
                  "08_one_run_audit": 54.0},
    "tiny": {"01_mechanism": 54.0, "02_probe_design": 42.0, "03_llr_checks": 30.0, "04_audit": 136.0,
             "05_ablations": 73.0, "06_multiround_mauve": 95.0, "07_audit_an_implementation": 39.0,
             "08_one_run_audit": 41.0},
}
#: the 1-minute load average (the run's own work included) and the cores each warm profile was measured at
#: (:func:`load_factor`)
PROFILE_LOAD = {"quick-warm": (2.4, 2), "tiny-warm": (9.0, 2)}
#: the profiles a preset's ETA chooses among (:meth:`RunClock.profile`); a preset not listed uses its own or quick's
PROFILES = {"quick": ("quick", "quick-warm")}
_DEFAULT_SECONDS = 150.0  # a notebook the reference run does not have
#: texts per second of the quick cold run: notebook 01 embedded 54,341 texts in its cold less its warm seconds
#: (654 − 34 s, 2 idle cores); the rough estimate's rate (:func:`listed_line`)
REFERENCE_RATE = 88.0


def _loadavg(default: float | None = math.nan) -> float | None:
    """The 1-minute load average, or ``default`` where the platform has none."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else default


def _per_notebook(texts: Mapping[str, int]) -> str:
    """``01_mechanism 54,341; 04_audit 1,200``: the notebooks with texts to embed."""
    return "; ".join(f"{nb} {k:,}" for nb, k in texts.items() if k)


def format_duration(seconds: float) -> str:
    """``"45 s"``, ``"12 min"``, ``"1 h 05 min"`` (rounded; for progress lines). Raises ValueError for < 0 or NaN."""
    if not seconds >= 0:
        raise ValueError(f"seconds={seconds!r} must be a finite number ≥ 0")
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = int(round(seconds / 60))
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def warm_profile(preset: str) -> tuple[str, dict]:
    """The warm profile of ``preset`` (``<preset>-warm`` in :data:`REFERENCE_SECONDS`; quick's for a preset without
    one): its name and notebook → seconds."""
    name = f"{preset}-warm" if f"{preset}-warm" in REFERENCE_SECONDS else "quick-warm"
    return name, REFERENCE_SECONDS[name]


def load_factor(profile: str, cpus: int | None = None, load: float | None = None) -> tuple[float, str]:
    """How many times its seconds the work of warm ``profile`` is expected to take now, and what that assumes.

    A notebook's work shares the cores with everything else running, so its time grows as the load over the cores
    once the load exceeds them (tiny's warm runs on 2 cores follow this within ±15 %). So the factor is
    max(1, (load + 1) / cpus) / max(1, load_ref / cpus_ref): ``load`` the 1-minute load average now (before this
    run: + 1 for the run itself), ``load_ref`` and ``cpus_ref`` the profile's (:data:`PROFILE_LOAD`). It assumes
    cores as fast as the profile's and a load that stays as it is."""
    cpus = cpus or os.cpu_count() or 1
    if load is None:
        load = _loadavg()
    ref, ref_cpus = PROFILE_LOAD[profile]
    known = not math.isnan(load)
    factor = (max(1.0, (load + 1) / cpus) if known else 1.0) / max(1.0, ref / ref_cpus)
    now = f"load {load:.1f} now + this run" if known else "an unknown load (taken as idle)"
    return factor, f"measured at load {ref:.1f} on {ref_cpus} cores; × {factor:.2f} for {now} on {cpus} cores"


def notebook_worlds(notebook: str, params: Mapping) -> list:
    """The ``pe_kit.study.world.StudyConfig`` of every world a notebook builds from its papermill parameters, as
    the notebooks call ``study.setup.study_config``: 04 one per arm × bank; 05 its own, the sweep arm's and
    one per encoder of the Table 3 ablation (``encoders``; ``auto`` = the installed ones); 07 none (it audits
    implementations on synthetic data); every other notebook its own."""
    from pe_kit.study.setup import study_config

    num = notebook.split("_")[0]
    if num == "07":
        return []
    if num == "04":
        return [study_config(params, arm=a, bank=b) for a in params["arms"] for b in params["banks"]]
    configs = [study_config(params)]
    if num == "05":
        from pe_kit.text.models import available_encoders

        enc = params.get("encoders")
        names = available_encoders() if enc in ("auto", ["auto"], None) else list(enc)
        configs += [study_config(params, arm=params["sweep_arm"])] + [study_config(params, model=m) for m in names]
    return configs


def embedding_plan(params_by_notebook: Mapping[str, Mapping], sample: int = 256, seconds: float = 5.0,
                   clock=time.perf_counter, listed: Callable[[dict], None] | None = None) -> dict:
    """The texts each notebook will embed that the embedding cache lacks, and how long that takes here.

    A text of any world (:func:`notebook_worlds`, ``study.world.world_texts``) counts once, for the first notebook
    that embeds it with its encoder's store, and only when that store lacks it; a generated bank's texts count as
    new. ``listed`` (if given) receives ``{notebook: texts}`` before the cache is asked (an upper bound). Per
    encoder, up to ``sample`` texts spread over the list are embedded in batches of 32, timed after 16 untimed ones,
    until ``seconds`` have passed; they stay in the cache.

    Returns:
        ``{"texts": {notebook: texts left to embed}, "seconds": {notebook: texts / rate}, "rates": {encoder
        model id: texts per second}, "measure_seconds": seconds spent here}``.
    """
    from pe_kit.cache import EmbeddingStore, cache_dir, text_key
    from pe_kit.study.world import world_texts
    from pe_kit.text.encoder import Encoder

    t0 = clock()
    encoders: dict[str, Encoder] = {}
    new: dict[str, dict] = {}  # encoder id → text key → (text, notebook)
    generated = {nb: 0 for nb in params_by_notebook}
    configs = set()
    for nb, params in params_by_notebook.items():
        for config in notebook_worlds(nb, params):
            if config in configs:
                continue
            configs.add(config)
            enc = Encoder(config.model, max_seq_length=config.max_seq_length, progress=False)
            enc = encoders.setdefault(enc.model_id, enc)
            texts, n_generated = world_texts(config)
            seen = new.setdefault(enc.model_id, {})
            seen.update((k, (t, nb)) for k, t in ((text_key(t), t) for t in texts) if k not in seen)
            generated[nb] += n_generated
    if listed is not None:
        first = Counter(nb for todo in new.values() for _, nb in todo.values())
        listed({nb: n + first[nb] for nb, n in generated.items()})
    for eid, todo in new.items():  # store_key resolves the encoder's backend
        lacks = set(EmbeddingStore.open(cache_dir() / "embeddings" / encoders[eid].store_key).missing(todo))
        new[eid] = {k: v for k, v in todo.items() if k in lacks}
    rates = {}
    for eid, todo in new.items():
        items = list(todo.items())
        spread = items[::max(1, len(items) // sample)][:sample]
        if len(spread) > 16:
            encoders[eid].encode([t for _, (t, _) in spread[:16]])
            t1, n = clock(), 16
            while n < len(spread) and (n == 16 or clock() - t1 < seconds):
                encoders[eid].encode([t for _, (t, _) in spread[n:n + 32]])
                n = min(n + 32, len(spread))
            rates[eid] = (n - 16) / max(clock() - t1, 1e-6)
            for k, _ in spread[:n]:
                del todo[k]
    fallback = min(rates.values(), default=0.0)
    texts = dict(generated)
    seconds = {nb: n / fallback if fallback else 0.0 for nb, n in generated.items()}
    for eid, todo in new.items():
        rate = rates.get(eid, fallback)
        for _, nb in todo.values():
            texts[nb] += 1
            seconds[nb] += 1 / rate if rate else 0.0
    return {"texts": texts, "seconds": seconds, "rates": rates, "measure_seconds": clock() - t0}


def listed_line(texts: Mapping[str, int], preset: str, cpus: int | None = None, load: float | None = None) -> str:
    """The rough estimate, from the texts the run embeds (:func:`embedding_plan`'s ``listed``: before the cache is
    asked, so at most these) at :data:`REFERENCE_RATE` scaled to the cores free now (× cpus / 1-minute load
    average when the load exceeds the cores), plus the preset's :func:`warm_profile` scaled to the load now
    (:func:`load_factor`)."""
    cpus = cpus or os.cpu_count() or 1
    load = _loadavg(0.0) if load is None else (load or 0.0)
    rate = REFERENCE_RATE * min(1.0, cpus / load) if load > 0 else REFERENCE_RATE
    name, warm = warm_profile(preset)
    factor, assumes = load_factor(name, cpus, load)
    n, embed = sum(texts.values()), sum(texts.values()) / rate
    other = factor * sum(warm.get(nb, _DEFAULT_SECONDS) for nb in texts)
    return (f"rough estimate: at most {n:,} texts to embed ({_per_notebook(texts)}) at ≈ {rate:.0f} text/s (the "
            f"reference run's {REFERENCE_RATE:.0f} × {cpus} cores / load {load:.1f}) ≈ {format_duration(embed)}, "
            f"plus {format_duration(other)} of the other work (profile {name}, {assumes}) → at most about "
            f"{format_duration(embed + other)} in all; the cache is asked and the rate timed once the encoder is ready")


def run_plan(params_by_notebook: Mapping[str, Mapping], preset: str,
             early: Callable[[str], None] | None = None) -> dict:
    """The run-level estimate: :func:`embedding_plan` in a child Python process (the encoders' memory goes back to
    the system when it ends) plus the preset's :func:`warm_profile` scaled to the load before the child starts
    (:func:`load_factor`); ``early`` (if given) receives :func:`listed_line` as soon as the child has listed the
    texts, before its encoder is ready.

    Returns:
        the plan's dict plus ``planned`` (notebook → embedding + warm seconds), ``profile`` (the warm profile's
        name), ``line`` (what the runner prints first) and ``notes`` (notebook → what its start line adds).

    Raises:
        RuntimeError: the child failed (its exit status and last line of stderr are named).
    """
    load = _loadavg()  # the others' load, before the child's
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "pe_kit.run.run_progress",
                                 json.dumps(params_by_notebook, default=str)],
                                stdout=subprocess.PIPE, stderr=err, text=True, env=os.environ.copy())
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if early is not None and line.startswith('{"listed": '):
                early(listed_line(json.loads(line)["listed"], preset, load=load))
        proc.wait()
        err.seek(0)
        stderr = err.read()
    try:
        plan = json.loads(lines[-1])
    except (IndexError, ValueError):
        last = (stderr.strip().splitlines() or ["no message"])[-1]
        raise RuntimeError(f"the estimate's child process failed (exit status {proc.returncode}): {last}") from None
    name, warm = warm_profile(preset)
    factor, assumes = load_factor(name, load=load)
    plan["planned"] = {nb: plan["seconds"][nb] + factor * warm.get(nb, _DEFAULT_SECONDS) for nb in params_by_notebook}
    plan["profile"] = name
    plan["notes"] = {nb: f"; embeds {k:,} texts the cache lacks (≈ {format_duration(plan['seconds'][nb])})"
                     for nb, k in plan["texts"].items() if k}
    n = sum(plan["texts"].values())
    embed = sum(plan["seconds"].values())
    head = (f"{n:,} texts to embed that the cache lacks ({_per_notebook(plan['texts'])}"
            + (f") at {min(plan['rates'].values()):.0f} text/s (timed just now)" if plan["rates"] else ")")
            + f" ≈ {format_duration(embed)}"
            if n else "every text is in the embedding cache")
    own = "" if name == f"{preset}-warm" else f"; preset {preset} has none of its own, quick's sizes may be smaller"
    total = sum(plan["planned"].values())
    plan["line"] = (f"estimate: {head}, plus {format_duration(total - embed)} of the other work (profile {name}, "
                    f"{assumes}{own}) → about {format_duration(total)} in all")
    return plan


class RunClock:
    """Notebook i of n and the run's ETA: :meth:`start` before a notebook runs, :meth:`finish` after.

    Args:
        notebooks: the stems this run will go through, in order (reused ones included).
        preset: the preset's name, choosing the reference shares (:data:`REFERENCE_SECONDS`; quick's for others).
        clock: a zero-argument function returning seconds (default ``time.perf_counter``).
        planned: notebook → planned seconds (:func:`run_plan`), or None for the preset's reference shares.
    """

    def __init__(self, notebooks: Sequence[str], preset: str = "quick", clock=time.perf_counter,
                 planned: Mapping[str, float] | None = None):
        self.notebooks = list(notebooks)
        names = PROFILES.get(preset, (preset if preset in REFERENCE_SECONDS else "quick",))
        self.profiles = {"plan": dict(planned)} if planned is not None else {n: REFERENCE_SECONDS[n] for n in names}
        self.reference = next(iter(self.profiles.values()))
        self.planned = planned is not None
        self.ran: dict[str, float] = {}
        self.clock = clock
        self.t0 = clock()
        self.done: set[str] = set()
        self._current: tuple[str, float] | None = None
        self.first_estimate = sum(planned.values()) if planned is not None else None
        self.reported: dict[str, dict] = {}

    def weight(self, notebook: str) -> float:
        """The notebook's seconds in the reference profile in use (:meth:`profile`; 150 s for an unknown one)."""
        return self.reference.get(notebook, _DEFAULT_SECONDS)

    def profile(self) -> str:
        """The name of the reference profile nearest to the notebooks run so far: the smallest sum over them of
        |log(observed seconds / profile seconds)| (ties and no data: the first, cold profile). Sets the weights."""
        best, best_cost = next(iter(self.profiles)), float("inf")
        for name, ref in self.profiles.items():
            cost = sum(abs(math.log(max(sec, 1e-3) / ref.get(nb, _DEFAULT_SECONDS))) for nb, sec in self.ran.items())
            if cost < best_cost - 1e-12:
                best, best_cost = name, cost
        self.reference = self.profiles[best]
        return best

    def start(self, notebook: str) -> None:
        self._current = (notebook, self.clock())

    def finish(self, notebook: str, reused: bool = False) -> None:
        """Mark ``notebook`` finished (or ``reused``: skipped, not counted in the pace)."""
        if not reused and self._current and self._current[0] == notebook:
            self.ran[notebook] = self.clock() - self._current[1]
            self.profile()
        self._current = None
        self.done.add(notebook)

    def seconds_left(self) -> float | None:
        """Estimated seconds until the run's last notebook ends, or None before any notebook has run (without a
        plan).

        Pace = seconds of the notebooks run so far / their reference seconds (1 with a plan and none run yet);
        left = pace × reference seconds of the notebooks not finished, minus the time the current one has already
        run (never below 0).
        """
        ran_weight = sum(self.weight(nb) for nb in self.ran)
        if ran_weight <= 0 and not self.planned:
            return None
        pace = sum(self.ran.values()) / ran_weight if ran_weight > 0 else 1.0
        left = pace * sum(self.weight(nb) for nb in self.notebooks if nb not in self.done)
        if self._current is not None:
            left -= self.clock() - self._current[1]
        return max(0.0, left)

    def line(self) -> str:
        """E.g. ``"run: 3 of 8 notebooks done, 14 min elapsed, about 21 min left"`` (the ETA: pace so far × the
        remaining notebooks' reference shares, :meth:`seconds_left`)."""
        n_done, n = len(self.done), len(self.notebooks)
        head = f"run: {n_done} of {n} notebooks done, {format_duration(self.clock() - self.t0)} elapsed"
        if n_done == n:
            return head
        left = self.seconds_left()
        return head + (f", about {format_duration(left)} left" if left is not None
                       else ", time left estimated once a notebook has run")

    def checks(self) -> list[str]:
        """The first estimate against the time taken, each once: ``halfway`` when the notebooks run so far were
        planned at half of it or more, ``end`` when every notebook is done. Recorded in :attr:`reported` (for
        ``run.json``); empty without a plan or with nothing new to say."""
        if not self.planned or not self.first_estimate or not self.ran:
            return []
        out = []
        planned = sum(self.weight(nb) for nb in self.ran)
        for name, due in (("halfway", planned >= self.first_estimate / 2),
                          ("end", len(self.done) == len(self.notebooks))):
            if due and name not in self.reported:
                actual = self.clock() - self.t0
                self.reported[name] = {"estimate_s": planned, "actual_s": actual, "notebooks": list(self.ran),
                                       "first_estimate_s": self.first_estimate}
                what = "at the halfway point" if name == "halfway" else "at the end"
                out.append(f"estimate vs actual {what}: the notebooks run so far ({', '.join(self.ran)}) were "
                           f"estimated at {format_duration(planned)} of {format_duration(self.first_estimate)}; they "
                           f"took {format_duration(actual)} ({actual / planned - 1:+.0%})")
        return out


def machine_info() -> dict:
    """Where a run ran, for ``run.json``: platform, CPU count and model, the 1-minute load average (other
    processes sharing the cores), and the GPU torch sees (None without one or without torch)."""
    cpu = platform.processor() or None
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu)
    except OSError:
        pass
    try:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001 - provenance only; a broken torch must not fail a finished run
        gpu = None
    return {"platform": platform.platform(), "cpus": os.cpu_count(), "cpu": cpu,
            "load_average_1min": _loadavg(None), "gpu": gpu}


if __name__ == "__main__":  # run_plan's child: the texts listed, then the plan of the notebooks' parameters in
    # argv[1] (JSON), each one line of JSON
    plan = embedding_plan(json.loads(sys.argv[1]), listed=lambda t: print(json.dumps({"listed": t}), flush=True))
    print(json.dumps(plan), flush=True)
