#!/usr/bin/env python3
"""Regenerate BENCHMARKS.md (and its pictures in docs/figures/) from bench runs' --out directories.

    .venv/bin/python benchmarks/benchmarks_md.py bench-results/all bench-results/node bench-results/node64 bench-results/mlperf bench-results/checkpoint

The work is done by benchmarks/harness/benchmarks_page.py; this only hooks it to the command line.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # run from a checkout: the mountctl beside this script


def main(argv: list[str] | None = None) -> int:
    from benchmarks.harness.benchmarks_page import write_pages
    from mountctl import MountctlError

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="the --out directory of a `resnet.py bench` run")
    parser.add_argument("--root", default=ROOT, help="the checkout whose BENCHMARKS.md is written (default: this one)")
    parser.add_argument("--keep", action="store_true", help="keep the sections of suites not given as they stand "
                        "(each with its own run's command and commit) instead of writing 'not run'")
    args = parser.parse_args(argv)
    try:
        written = write_pages(args.run_dirs, args.root, keep=args.keep)
    except MountctlError as exc:
        print(f"benchmarks_md.py: {exc}", file=sys.stderr)
        return 2
    print("wrote " + ", ".join(os.path.relpath(path, args.root) for path in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
