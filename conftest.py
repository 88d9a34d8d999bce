"""Doctests of pullback's modules that need a newer SciPy than Python 3.10 can install (SciPy 1.15 at most)."""

import pytest

# the docstring examples that solve stacks of matrices, which SciPy's solves take from SciPy 1.16
_STACKS_OF_MATRICES = {
    "pullback.rules.scipy_linalg.cho_factor", "pullback.rules.scipy_linalg.cho_solve",
    "pullback.rules.scipy_linalg.solve", "pullback.rules.scipy_linalg.solve_triangular", "pullback.scipy.linalg",
}


def _scipy_batches():
    try:
        import numpy as np
        import scipy.linalg
    except ImportError:
        return True  # (the examples then fail as without SciPy, as they always have)
    try:
        scipy.linalg.solve(np.stack([np.eye(2)] * 2), np.ones((2, 2, 1)))
    except ValueError:
        return False
    return True


def pytest_collection_modifyitems(config, items):
    doctests = [item for item in items if isinstance(item, pytest.DoctestItem) and item.name in _STACKS_OF_MATRICES]
    if doctests and not _scipy_batches():
        skip = pytest.mark.skip(reason="SciPy's solves take stacks of matrices from SciPy 1.16 (Python 3.10 has 1.15 at most)")
        for item in doctests:
            item.add_marker(skip)
