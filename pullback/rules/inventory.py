"""Every public callable of the NumPy and SciPy namespaces pullback follows, in one of three lists.

- *covered*: it has a row of the coverage table (a rule, a composite, no gradient by nature,
  or a clear refusal), found in the registry;
- *non-differentiable*: nothing a derivative could flow through (I/O, dtypes, integer or
  boolean results, arrays built from shapes), listed with the reason in `NONDIFFERENTIABLE`;
- *not yet covered*: a differentiable function without a rule (it raises a clear error on
  traced values), listed in `NOT_YET`.

Scalar types (`numpy.float64`, ...) and exception and warning classes are not counted: they
are types, not functions of arrays. `tests/test_inventory.py` fails when a public callable
is in none of the lists, or in a list and covered too.

>>> from pullback.rules import inventory
>>> inventory.status("numpy", "sin")
'covered'
>>> inventory.status("numpy", "zeros")
'non-differentiable'
"""

import importlib
import inspect

import numpy as np

from ._register import ENTRIES
from .inventory_numpy import NONDIFFERENTIABLE as _NUMPY_NONDIFF
from .inventory_numpy import NOT_YET as _NUMPY_NOT_YET
from .inventory_scipy import NONDIFFERENTIABLE as _SCIPY_NONDIFF
from .inventory_scipy import NOT_YET as _SCIPY_NOT_YET

# namespace -> the names that count (None: every public callable of the module)
NAMESPACES = {
    "numpy": None,
    "numpy.linalg": None,
    "numpy.fft": None,
    "scipy.special": None,
    "scipy.linalg": None,
    "scipy.signal": ("convolve", "correlate", "fftconvolve", "lfilter"),
    "scipy.spatial.distance": ("cdist", "pdist", "squareform"),
}

# qualified name ("numpy.zeros") -> why no derivative flows through it
NONDIFFERENTIABLE = {**_NUMPY_NONDIFF, **_SCIPY_NONDIFF}
# qualified name -> what is missing
NOT_YET = {**_NUMPY_NOT_YET, **_SCIPY_NOT_YET}

# Deprecated names that only the older NumPy and SciPy pullback supports still have (Python 3.10 installs
# SciPy 1.15 at most): not counted, so that the inventory and the coverage table are the same on every
# version. Qualified name -> what happens to a traced value there.
OLDER_ONLY = {
    "numpy.in1d": "removed in NumPy 2.4; np.isin is covered (in1d raises pullback's error naming stop_gradient)",
    "numpy.trapz": "removed in NumPy 2.4; computes through np.trapezoid, which is covered",
    "scipy.linalg.kron": "not in SciPy 1.17; computes with NumPy's operations (np.kron is covered)",
    "scipy.special.clpmn": "not in SciPy 1.17 (assoc_legendre_p replaces it); not covered",
    "scipy.special.lpmn": "not in SciPy 1.17 (assoc_legendre_p_all replaces it); not covered",
    "scipy.special.lpn": "not in SciPy 1.17 (legendre_p_all replaces it); not covered",
    "scipy.special.sph_harm": "not in SciPy 1.17 (sph_harm_y replaces it); not covered",
}


def public_callables(namespace):
    """name -> callable, for the public functions (and non-scalar classes) of `namespace`."""
    module = importlib.import_module(namespace)
    names = NAMESPACES.get(namespace)
    if names is None:
        names = [n for n in getattr(module, "__all__", dir(module)) if not n.startswith("_")]
    found = {}
    for name in names:
        obj = getattr(module, name, None)
        if obj is None or inspect.ismodule(obj) or not callable(obj) or _is_type_only(obj) \
                or f"{namespace}.{name}" in OLDER_ONLY:
            continue
        found[name] = obj
    return found


def _is_type_only(obj):
    return inspect.isclass(obj) and issubclass(obj, (np.generic, BaseException))


def _covered_names():
    import pullback.rules  # noqa: F401  (every rule file registers on import)

    if _loaded_scipy():
        import pullback.scipy.linalg  # noqa: F401
        import pullback.scipy.special  # noqa: F401
    return {e.name for e in ENTRIES.values()}


def _loaded_scipy():
    try:
        import scipy.special  # noqa: F401
    except ImportError:
        return False
    return True


def is_covered(namespace, name, obj=None):
    """Whether `namespace.name` has a row of the coverage table (by identity or by name)."""
    obj = obj if obj is not None else public_callables(namespace).get(name)
    try:
        if obj is not None and obj in ENTRIES:
            return True
    except TypeError:  # unhashable
        pass
    return f"{namespace}.{name}" in _covered_names()


def status(namespace, name):
    """'covered', 'non-differentiable', 'not yet covered', or None when `namespace.name` is in no list."""
    qualified = f"{namespace}.{name}"
    if is_covered(namespace, name):
        return "covered"
    if qualified in NONDIFFERENTIABLE:
        return "non-differentiable"
    if qualified in NOT_YET:
        return "not yet covered"
    return None


def report(namespace):
    """status -> sorted names, for every public callable of `namespace`."""
    by_status = {}
    for name in public_callables(namespace):
        by_status.setdefault(status(namespace, name), []).append(name)
    return {k: sorted(v) for k, v in by_status.items()}
