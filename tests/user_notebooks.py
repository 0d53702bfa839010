"""A user notebook for the runner's tests (``--notebooks-dir``): a ``parameters`` cell and one code cell."""
from __future__ import annotations

from pathlib import Path

import nbformat


def one_cell_notebook(folder: Path, source: str, name: str = "01_mechanism.ipynb") -> Path:
    """Write ``folder/name`` (folder created): the tiny preset's parameters cell, then ``source``; return the path."""
    folder.mkdir(parents=True, exist_ok=True)
    params = nbformat.v4.new_code_cell('output_dir = "."\npreset = "tiny"\nseed = 0')
    params.metadata["tags"] = ["parameters"]
    path = folder / name
    nbformat.write(nbformat.v4.new_notebook(cells=[params, nbformat.v4.new_code_cell(source)]), path)
    return path
