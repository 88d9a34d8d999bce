import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import numpy as np  # noqa: E402
import pytest  # noqa: E402

_approx = pytest.approx
_DEFAULT_ABS, _DEFAULT_REL = 1e-12, 1e-6


def _strict_approx(expected, rel=None, abs=None, nan_ok=False):
    """`pytest.approx`, refusing a check that its default absolute tolerance (1e-12) makes looser than
    `rel` asks, for an expected value below 1e-9: `approx(1e-17, rel=1e-6)` passes for any value within
    1e-12, so it cannot fail. Such a
    test must say what it means: `abs=0.0` (the relative check alone) or the absolute tolerance it wants."""
    if abs is None and not isinstance(expected, (dict, str)):
        try:
            values = np.abs(np.asarray(expected, dtype=complex)).ravel()
        except (TypeError, ValueError):
            values = np.array([])
        asked = values * (_DEFAULT_REL if rel is None else rel)
        # (where the default is a relative tolerance of 1e-3 or more, and looser than asked)
        hidden = values[(values > 0) & (values < _DEFAULT_ABS * 1e3) & (asked < _DEFAULT_ABS)]
        if hidden.size:
            raise AssertionError(
                f"pytest.approx of {hidden[0]!r} with the default abs=1e-12 accepts values far from it (rel="
                f"{_DEFAULT_REL if rel is None else rel} asks for less); pass abs=0.0, or the absolute tolerance meant.")
    return _approx(expected, rel=rel, abs=abs, nan_ok=nan_ok)


pytest.approx = _strict_approx
