"""The benchmark suite: the same as `python -m pullback bench` (`--help` lists the options).

    python bench/run.py --quick --out /tmp/bench
    python bench/run.py --only chain-small,mlp --samples 21
"""

import sys

from pullback.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
