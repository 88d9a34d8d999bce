"""The built-in derivative rules, one file per family. Importing this package registers them."""

from . import indexing, linalg, reductions, shape, ufuncs  # noqa: F401
from . import forward  # noqa: F401,E402  (forward rules for the families above)
