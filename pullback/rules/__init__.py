"""The built-in derivative rules, one file per family. Importing this package registers them."""

from . import indexing, linalg, reductions, shape, ufuncs  # noqa: F401
