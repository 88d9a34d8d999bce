"""The built-in derivative rules, one file per family. Importing this package registers them."""

from . import indexing, linalg, reductions, shape, ufuncs  # noqa: F401
from . import forward  # noqa: F401,E402  (forward rules for the families above)
from . import scans  # noqa: F401
from . import selection  # noqa: F401
from . import decompositions  # noqa: F401
from . import fft  # noqa: F401
from . import special  # noqa: F401
from . import scipy_linalg  # noqa: F401
