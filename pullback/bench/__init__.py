"""The benchmark suite: pullback against a hand-written NumPy floor and its peers, side by side.

Run it with `python -m pullback bench` (or `python -m pullback.bench`); `--help` lists the
options. Not imported by `import pullback`; peers are imported only when they run.
"""
