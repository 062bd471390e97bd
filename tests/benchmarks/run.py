"""`make bench`: run the benchmarks (see tests/benchmarks/README.md and `benchmarks.runner`).

    .venv/bin/python tests/benchmarks/run.py [--only NAME ...] [--size smoke] [--profile NAME]
"""

from __future__ import annotations

import sys
from pathlib import Path


def _main() -> int:
    # Run as a script: make the `benchmarks` package (this folder) importable from tests/.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.runner import main

    return main()


if __name__ == "__main__":
    sys.exit(_main())
