"""The benchmarks' shared ``--smoke`` flag: tiny sizes, so tests/test_benchmarks.py runs every script."""
from __future__ import annotations

import argparse
from pathlib import Path


def parse_args(ap: argparse.ArgumentParser, argv=None, **tiny) -> argparse.Namespace:
    """Add ``--smoke`` to ``ap`` and parse ``argv``; under ``--smoke`` every option named in ``tiny`` takes its
    tiny value unless given on the command line. Prints the figures at sizes that check nothing but that
    the script runs end to end."""
    ap.add_argument("--smoke", action="store_true",
                    help="tiny sizes (" + ", ".join(f"{k}={v}" for k, v in tiny.items()) + "): a run that checks "
                         "the script still prints its figures, not a measurement")
    args = ap.parse_args(argv)
    if args.smoke:
        ap.set_defaults(**tiny)
        args = ap.parse_args(argv)
    return args

#: The tests' tiny real corpus (80 bloggers × 16 posts; the ``tiny`` preset's data): smoke runs build their worlds on it.
TINY_DATA = str(Path(__file__).resolve().parents[1] / "tests" / "data" / "blogs-tiny.jsonl.gz")
