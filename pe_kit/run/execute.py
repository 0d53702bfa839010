"""Execute one notebook of ``pe-kit reproduce`` with papermill, on a kernel of this very interpreter, echoing the
lines its cells write to stderr (``pe_kit.progress`` steps among them).
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
    """Name of a Jupyter kernel that runs *this* Python interpreter (a spec under ``cache_dir()/jupyter``, put first
    on ``JUPYTER_PATH`` for this process)."""
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


class _EchoLines:
    """A file for papermill's ``stderr_file``: each non-empty line a cell writes to stderr goes to ``echo`` after
    ``prefix`` (the kernels' ``pe_kit.progress`` lines)."""

    def __init__(self, echo: Callable[[str], None], prefix: str):
        self.echo, self.prefix = echo, prefix

    def write(self, text: str) -> None:
        for line in text.splitlines():
            if line.strip():
                self.echo(self.prefix + line)

    def flush(self) -> None:
        pass


def execute_notebook(nb: str, src: Path, out_nb: Path, params: Mapping[str, Any], run_dir: Path,
                     kernel_name: str | None, log_output: bool, echo: Callable[[str], None]) -> ReproduceError | None:
    """Execute notebook ``nb`` (file ``src``) into ``out_nb`` with papermill in ``run_dir``, ``src``'s folder first
    on ``PYTHONPATH``, echoing the cells' stderr (their stdout too with ``log_output``). Returns None, or the
    failure as a :class:`ReproduceError`."""
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    from pe_kit.run.kernel import IOPUB_TIMEOUT_S, KERNEL_START_TIMEOUT_S, LosslessKernelManager

    # the notebook's own step modules (``from steps import …``) import from its folder, in the kernel and its children
    path = os.pathsep.join(filter(None, (str(src.resolve().parent), os.environ.get("PYTHONPATH"))))
    try:
        with environ(PYTHONPATH=path):
            pm.execute_notebook(str(src), str(out_nb), parameters=params,
                                kernel_name=kernel_name or this_python_kernel(),
                                language="python",  # our own kernel runs it, whatever the notebook's metadata says
                                progress_bar=False,  # its per-cell bar misleads (one long cell); RunClock reports
                                cwd=str(run_dir),
                                iopub_timeout=IOPUB_TIMEOUT_S, raise_on_iopub_timeout=True,  # outputs never dropped
                                start_timeout=KERNEL_START_TIMEOUT_S, execution_timeout=None,
                                kernel_manager_class=LosslessKernelManager,
                                stdout_file=sys.stdout if log_output else None,
                                stderr_file=_EchoLines(echo, "    "))
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
    return None
