"""`python -m pullback.bench`: the benchmark suite (see `pullback.bench.cli`)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
