"""Execute one notebook of ``pe-kit reproduce`` with papermill, on a kernel of this very interpreter, echoing the
lines its ``pe_kit.progress`` steps write to ``<run>/.progress/<notebook>.log``.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from pe_kit.cache import atomic_write_bytes, cache_dir, content_hash

__all__ = ["ReproduceError", "this_python_kernel", "execute_notebook", "environ"]


@contextlib.contextmanager
def environ(**values: str) -> Iterator[None]:
    """Set environment variables for the block (the kernels started in it inherit them); afterwards each has its
    value from before again, or is removed when it had none."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class ReproduceError(RuntimeError):
    """A notebook of the reproduction failed: ``notebook`` (stem), ``cell_index`` (or None), ``executed`` (path)."""

    def __init__(self, message: str, notebook: str | None = None, cell_index: int | None = None,
                 executed: Path | None = None):
        super().__init__(message)
        self.notebook, self.cell_index, self.executed = notebook, cell_index, executed


def this_python_kernel() -> str:
    """Name of a Jupyter kernel that runs *this* Python interpreter, registered for this process only. A user-level
    ``python3`` kernelspec could point at another interpreter; this writes a spec ``pe_kit-<hash of sys.executable>``
    under ``cache_dir()/jupyter`` and puts that folder first on ``JUPYTER_PATH``."""
    name = "pe_kit-" + content_hash(sys.executable)[:12]
    root = cache_dir() / "jupyter"
    # log level ERROR: the kernel's start-up chatter stays off the terminal; cells' warnings still reach the notebook
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}",
                     "--IPKernelApp.log_level=ERROR"],
            "display_name": f"Python (pe_kit, {sys.executable})", "language": "python"}
    path = root / "kernels" / name / "kernel.json"
    data = json.dumps(spec, indent=1).encode()
    if not path.is_file() or path.read_bytes() != data:
        atomic_write_bytes(path, data)
    current = os.environ.get("JUPYTER_PATH", "")
    if str(root) not in current.split(os.pathsep):
        os.environ["JUPYTER_PATH"] = str(root) + (os.pathsep + current if current else "")
    return name


class _ProgressTail:
    """Prints the lines a notebook's kernel appends to its progress file: a daemon thread polls it every ``poll``
    seconds and passes each new line to ``echo`` with ``prefix`` (in ``tqdm``'s external-write mode); ``stop()``
    prints what is left and ends the thread."""

    def __init__(self, path: Path, echo: Callable[[str], None], prefix: str, poll: float = 0.5):
        import threading

        self.path, self.echo, self.prefix, self.poll = path, echo, prefix, poll
        self._pos = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"pe_kit-progress-{path.stem}", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        from tqdm.std import tqdm

        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._pos)
                data = fh.read()
        except OSError:
            return
        end = data.rfind(b"\n") + 1
        if end == 0:
            return
        self._pos += end
        for line in data[:end].decode("utf-8", errors="replace").splitlines():
            if line.strip():
                with tqdm.external_write_mode():
                    self.echo(f"{self.prefix}{line}")

    def _loop(self) -> None:
        while not self._stop.wait(self.poll):
            self._drain()

    def stop(self) -> None:
        """End the thread and print the lines that arrived since the last poll."""
        self._stop.set()
        self._thread.join()
        self._drain()


def execute_notebook(nb: str, src: Path, out_nb: Path, params: Mapping[str, Any], run_dir: Path,
                     kernel_name: str | None, log_output: bool, echo: Callable[[str], None]) -> ReproduceError | None:
    """Execute notebook ``nb`` (file ``src``) into ``out_nb`` with papermill in ``run_dir``, on headless kernels
    (``PE_KIT_HEADLESS=1``, set by ``run_reproduction``) with ``src``'s folder first on ``PYTHONPATH``, and a fresh
    progress file echoed while it runs. Returns None, or the failure as a :class:`ReproduceError`."""
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    from pe_kit.run.kernel import IOPUB_TIMEOUT_S, KERNEL_START_TIMEOUT_S, LosslessKernelManager

    progress_file = run_dir / ".progress" / f"{nb}.log"  # pe_kit.progress lines from the kernel
    progress_file.parent.mkdir(exist_ok=True)
    progress_file.write_bytes(b"")
    tail = _ProgressTail(progress_file, echo, "    ")
    # with --log-output the cell's stderr reaches the terminal itself (pe_kit.progress.streamed)
    streamed = "1" if log_output else "0"
    # the notebook's own step modules (``from steps import …``) import from its folder, in the kernel and its children
    path = os.pathsep.join(filter(None, (str(src.resolve().parent), os.environ.get("PYTHONPATH"))))
    try:
        with environ(PE_KIT_PROGRESS_FILE=str(progress_file), PE_KIT_PROGRESS_STREAMED=streamed, PYTHONPATH=path):
            pm.execute_notebook(str(src), str(out_nb), parameters=params,
                                kernel_name=kernel_name or this_python_kernel(),
                                language="python",  # our own kernel runs it, whatever the notebook's metadata says
                                progress_bar=False,  # its per-cell bar misleads (one long cell); RunClock reports
                                cwd=str(run_dir),
                                iopub_timeout=IOPUB_TIMEOUT_S, raise_on_iopub_timeout=True,  # outputs never dropped
                                start_timeout=KERNEL_START_TIMEOUT_S, execution_timeout=None,
                                kernel_manager_class=LosslessKernelManager,
                                stdout_file=sys.stdout if log_output else None,
                                stderr_file=sys.stderr if log_output else None)
    except PapermillExecutionError as exc:
        return ReproduceError(
            f"notebook {nb} failed in cell {exc.cell_index} (execution count {exc.exec_count}; cells counted "
            f"from 0 in the executed notebook, which includes papermill's injected-parameters cell): "
            f"{exc.ename}: {exc.evalue}\n  executed notebook with the traceback: {out_nb}\n"
            f"  finished notebooks and cached steps are kept; rerun the same command to resume",
            nb, exc.cell_index, out_nb)
    except Exception as exc:  # kernel death, missing kernel, bad parameters …
        return ReproduceError(f"notebook {nb} failed before or between cells: {type(exc).__name__}: {exc}\n"
                              f"  partial notebook (if any): {out_nb}", nb, None, out_nb)
    finally:
        tail.stop()
    return None
