"""Where `check_gradient` used to live; the checker is `pullback.testing`."""

from .testing import GradientCheck, LeafCheck, check_gradient  # noqa: F401
