"""The built-in derivative rules, one file per family, each rule in both modes (reverse and
forward). Importing this package registers them."""

from . import indexing, linalg, reductions, shape, ufuncs  # noqa: F401
from . import scans  # noqa: F401
from . import selection  # noqa: F401
from . import decompositions  # noqa: F401
from . import fft  # noqa: F401
from . import special  # noqa: F401
from . import scipy_linalg  # noqa: F401
