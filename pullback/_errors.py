"""The errors that tell a user what went wrong and what to do instead.

Every message names the construct (the NumPy or SciPy function, the array type, the value)
and the fix.
"""

import sys

import numpy as np

from ._arrays import is_foreign_array, type_name
from ._compat import qualname_of
from ._registry import SERVED_BY, qualified_name
from ._standins import is_traced


def ufunc_name(ufunc):
    """`numpy.sin`, or `scipy.special.j0` for a SciPy ufunc: where the user found it."""
    for module_name in ("numpy", "scipy.special"):
        module = sys.modules.get(module_name)
        if module is not None and getattr(module, ufunc.__name__, None) is ufunc:
            return f"{module_name}.{ufunc.__name__}"
    return f"numpy.{ufunc.__name__}" if getattr(np, ufunc.__name__, None) is ufunc else f"the ufunc {ufunc.__name__}"


def missing_rule(fn):
    name = ufunc_name(fn) if isinstance(fn, np.ufunc) else qualified_name(fn)
    return NotImplementedError(
        f"pullback has no derivative rule for {name}. Register one with "
        f"@pullback.rrule({name}) on a function returning (y, back), or call it on "
        "pullback.stop_gradient(x) if no gradient should flow through it."
    )


def conversion_error(x):
    """The error for turning a traced value into a plain array: says who asked, and what to do instead."""
    if x._tape.closed:
        return RuntimeError(
            "This value was being differentiated by a gradient (or jvp) call that has already finished, "
            "so it cannot become a plain array. Values escaping `f` through globals or closures carry no "
            "gradient: keep pullback.stop_gradient(x) inside `f` if you need the plain value afterwards."
        )
    library = _library_caller()
    if library in _SUBCLASS_PACKAGES:
        return _subclass_refusal(_SUBCLASS_PACKAGES[library])
    if library == "numpy.vectorize":
        return TypeError(
            "numpy.vectorize calls its function on one element at a time, as plain numbers, so the gradient "
            "would be lost. Call the function on the whole array instead: written with NumPy operations "
            "(np.where for branches), it is differentiated directly.")
    if library is not None:
        return TypeError(library_advice(library))
    return TypeError(
        "Cannot convert a value that is being differentiated into a plain NumPy array (np.asarray, np.array, "
        "np.float64(x), np.float32(x), np.r_, a Python list of traced values given to NumPy, or writing it into a plain array such as "
        "np.zeros(n)): the gradient would be lost. Build arrays from traced values with np.stack([...]) or "
        "np.concatenate([...]); fill one element by element starting from np.zeros_like(x), which is traced; "
        "or compute the result functionally (np.where, indexing). pullback.stop_gradient(x) gives a plain "
        "value that carries no gradient, if that is what you want. A random draw reads its parameters so too "
        "(rng.normal(mu, sigma), rng.choice(x), rng.permutation(x), rng.choice(n, p=p)): draw standard numbers and "
        "transform them (mu + sigma * rng.standard_normal(shape)), index by drawn positions "
        "(x[rng.permutation(len(x))], x[rng.choice(len(x), k)]), or pass the probabilities as pb.stop_gradient(p)."
    )


_NOT_LIBRARIES = ("numpy", "pullback", "builtins", "copy", "functools", "contextlib")

# NumPy's modules whose functions convert their arguments without dispatching them to pullback (no rule can catch
# them): a conversion inside one is named as a library function's
_NUMPY_WITHOUT_DISPATCH = ("numpy.polynomial.",)

# NumPy's packages whose array subclass converts a traced value it is given (np.ma.masked_array(x), np.asmatrix(x))
_SUBCLASS_PACKAGES = {"numpy.ma": "numpy.ma.MaskedArray", "numpy.matrixlib": "numpy.matrix"}


def _library_caller():
    """The public name of the installed library function (SciPy, scikit-learn, ...) that converted a traced
    value, found on the call stack just below the user's code; None when the user's code did it."""
    import sys

    frame = sys._getframe(2)
    found = None
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        package = ".".join(module.split(".")[:2])
        if package in _SUBCLASS_PACKAGES:
            return package
        if module.startswith("numpy") and qualname_of(frame).startswith("vectorize."):
            return "numpy.vectorize"
        top = module.partition(".")[0]
        if module.startswith(_NUMPY_WITHOUT_DISPATCH):  # NumPy's own Python code that NumPy does not dispatch
            found = frame
        elif top not in _NOT_LIBRARIES:
            path = frame.f_code.co_filename
            if top == "scipy" or "site-packages" in path or "dist-packages" in path:
                found = frame
            else:
                break
        frame = frame.f_back
    return None if found is None else _public_name(found)


def _public_name(frame):
    """`scipy.special.logsumexp` for a frame in `scipy.special._logsumexp`; `scipy.stats.norm.logpdf`
    for a method of SciPy's `norm_gen` object; `scipy.linalg.cho_solve` for the `wrapper` frame
    of a decorator (in `scipy._lib`) around it."""
    parts = _public_parts(frame.f_globals.get("__name__", ""))
    name = frame.f_code.co_name
    if not _is_public(parts, name):
        wrapped = _wrapped(frame)
        if wrapped is not None:
            return wrapped
    owner = frame.f_locals.get("self")
    if owner is not None and not isinstance(owner, type):
        owner_name = getattr(owner, "name", None) or type(owner).__name__.removesuffix("_gen")
        name = f"{owner_name}.{name}"
    return ".".join(parts + [name])


def _public_parts(module):
    """The leading public parts of a module's dotted name: `scipy.linalg` for `scipy.linalg._basic`."""
    parts = []
    for part in module.split("."):
        if part.startswith("_"):
            break
        parts.append(part)
    return parts


def _is_public(parts, name):
    module = sys.modules.get(".".join(parts))
    return module is not None and callable(getattr(module, name, None))


def _wrapped(frame):
    """For a decorator's inner function (SciPy's `wrapper` around spherical_jn or cho_solve): the public
    name of the function it wraps, found among the frame's locals and closure variables."""
    for value in frame.f_locals.values():
        name = getattr(value, "__name__", None)
        if callable(value) and isinstance(name, str):
            parts = _public_parts(getattr(value, "__module__", None) or frame.f_globals.get("__name__", ""))
            if _is_public(parts, name):
                return ".".join(parts + [name])
    return None


def library_advice(name):
    """What to tell a user whose library function `name` converted a traced value."""
    stand_in = _stand_in(name)
    head = (f"{name} converts its input to a plain NumPy array, so pullback cannot differentiate through it "
            "(the gradient would be lost). ")
    if stand_in is not None:
        return head + f"Use {stand_in} instead: a differentiable stand-in with the same signature."
    if name.startswith("numpy.polynomial."):
        return head + (
            "pullback differentiates NumPy's older polynomial functions, whose coefficients come highest first: "
            "np.polyval(c[::-1], x) is numpy.polynomial.polynomial.polyval(x, c) (np.polyder, np.polyint, np.polymul "
            "likewise). Or write the computation with NumPy functions in your own code.")
    return head + (
        f"pullback has no stand-in for it yet: make it opaque with `g = pullback.primitive({name})`, call g, "
        "and give g a derivative with @pullback.rrule(g) (see the README, \"Your own rules\"). "
        "Or write the computation with NumPy functions in your own code."
    )


def _stand_in(name):
    """`pullback.scipy.special.logsumexp` when pullback has a stand-in for `scipy.special.logsumexp`."""
    import importlib

    parts = name.split(".")
    if parts[0] != "scipy" or len(parts) < 3:
        return None
    try:
        target = importlib.import_module("pullback." + ".".join(parts[:2]))
    except ImportError:
        return None
    for part in parts[2:]:
        target = getattr(target, part, None)
        if target is None:
            return None
    return "pullback." + name


def foreign_error(type_name):
    return TypeError(
        f"An array of type {type_name} met a value that pullback is differentiating. pullback differentiates "
        "arrays that speak NumPy's protocols (__array_function__ and __array_ufunc__, with shape and dtype) or the "
        "array API (__array_namespace__), and would silently lose or corrupt the gradient through this one. "
        "Convert it to a NumPy array first (np.asarray(a)), or keep it out of the differentiated code."
    )


def subclass_error(x):
    """The error for an array of an ndarray subclass (np.matrix, a masked array) meeting a traced value."""
    return _subclass_refusal(f"{type(x).__module__}.{type(x).__qualname__}")


def _subclass_refusal(name):
    return TypeError(
        f"An array of type {name} met a value that pullback is differentiating. It is a NumPy array subclass whose "
        "operations differ from ndarray's (np.matrix's * is a matrix product; a masked array skips masked "
        "values), which pullback does not follow. Use plain arrays: np.asarray(m) and x @ y for np.matrix; "
        "for a masked array, select the valid values (x[~mask]) or use np.where(mask, 0, x)."
    )


def check_operand(x):
    """Refuse an operand that pullback cannot differentiate alongside a traced value (never a silent result)."""
    if isinstance(x, np.ndarray):
        if type(x) is not np.ndarray and type(x) is not np.memmap:  # a memmap computes as an ndarray
            raise subclass_error(x)
        return
    cls = type(x)
    speaks_arrays = hasattr(cls, "__array_ufunc__") or hasattr(cls, "__array_function__") or hasattr(cls, "__array_namespace__")
    if speaks_arrays and not isinstance(x, np.generic) and not is_traced(x):
        if hasattr(cls, "__stop_gradient__") or is_foreign_array(x):  # pullback's containers; Dask, CuPy, ...
            return
        raise foreign_error(f"{cls.__module__}.{cls.__qualname__}")


def mixed_arrays_error(rule, args, error):
    """The error for an operation that failed on arrays of another library than NumPy (mixed types,
    shapes or chunks that do not line up): it names the operation and each array; None when every
    array is NumPy's, so NumPy's own message stands."""
    if isinstance(error, np.linalg.LinAlgError):  # data, not mixed arrays (code catches it: try inv, except svd)
        return None
    plain = [(a, False) if not is_traced(a) else (_plain(a), True) for a in _opened(args)]
    arrays = [(a, traced) for a, traced in plain if isinstance(a, np.ndarray) or is_foreign_array(a)]
    if getattr(error, "pullback_named", False) or not any(is_foreign_array(a) for a, _ in arrays):
        return None
    fn = SERVED_BY.get(rule)
    name = "an operation" if fn is None else ufunc_name(fn) if isinstance(fn, np.ufunc) else qualified_name(fn)
    described = " and ".join(_describe(a, traced) for a, traced in arrays)
    types = sorted({type_name(a) for a, _ in arrays})
    if isinstance(error, TypeError) and len(types) > 1:
        advice = (f" Arrays of different types ({', '.join(types)}) do not mix here: convert one to the other's type "
                  "explicitly (np.asarray(a, like=b), or the library's own transfer) before the call.")
    else:
        advice = " Check that their shapes (and a Dask array's chunks) line up." if isinstance(error, ValueError) else ""
    message = str(error) if str(error).endswith(".") else f"{error}."
    new = (TypeError if isinstance(error, TypeError) else ValueError)(f"{name} failed on {described}: {message}{advice}")
    new.pullback_named = True
    return new


def _plain(x):
    while is_traced(x):
        x = x._value
    return x


def _opened(args):
    for a in args:
        if type(a) in (list, tuple):
            yield from a
        else:
            yield a


def _describe(a, traced):
    chunks = getattr(a, "chunks", None)
    return (f"a {type_name(a)} of shape {tuple(a.shape)}" + (f" with chunks {chunks}" if chunks is not None else "")
            + (" (being differentiated)" if traced else ""))


def _numpy_caller():
    """`numpy.interp` when a NumPy function called from user code did the conversion, else None."""
    import sys

    frame, found = sys._getframe(2), None
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module == "numpy" or module.startswith("numpy."):
            found = frame
        elif found is not None or not module.startswith("pullback"):
            break
        frame = frame.f_back
    return None if found is None else f"numpy.{found.f_code.co_name}"


def lost_gradient(action):
    caller = _numpy_caller()
    if caller is not None and hasattr(getattr(np, caller[6:], None), "_implementation"):
        action = (f"{action}. {caller} converted it: the value came in an argument {caller} does not hand over "
                  f"to pullback (NumPy dispatches on its array arguments only); make one of those traced, "
                  f"or pass this one through pullback.stop_gradient")
    return TypeError(
        f"Cannot {action}: the value is being differentiated, and the gradient would be lost. "
        "Keep using NumPy operations on it, or take pullback.stop_gradient(x) if you want a plain value "
        "that carries no gradient."
    )


def refused(x, error):
    """`error`, pullback's refusal of something done with the traced `x` (a conversion to a plain value, a
    function without a rule), remembered by the call tracing `x`: code in `f` that catches it
    (`try: a[0] = x[0] except ValueError:`) goes on computing other values than it does without pullback,
    so that call raises it anyway once `f` returns (see `caught_refusal`). `x` may be None (nothing to tell)."""
    level = getattr(x, "_tape", None)
    if level is not None and getattr(level, "refused", False) is None:
        level.refused = error
    return error


def caught_refusal(level):
    """The error a gradient (or jvp) call raises when `f` returned after catching one of pullback's refusals
    (see `refused`); None when there was none."""
    error = level.refused
    if error is None:
        return None
    return type(error)(
        f"{error}\n\nThe function being differentiated raised this error and caught it itself (a try/except), then "
        "went on: it computed other values than it does without pullback. Make the change above, or let the error "
        "through.")


def written_after_use(kept, stop_gradient_value):
    """The error for a write, in the function being differentiated, into a NumPy array pullback made read-only:
    `kept` when a plain array a pullback keeps may be the one written (see `_values.guard_kept`),
    `stop_gradient_value` when pb.stop_gradient's value (or a view of it) may be."""
    parts = []
    if kept:
        parts.append(
            "f wrote into a NumPy array after an operation whose gradient reads it had used it (pullback makes such "
            "arrays read-only while f runs, so that the gradient cannot silently use the new values). Write into a "
            "copy (`m = m.copy()` before changing it), or build the new values without writing in place "
            "(np.where(mask, new, m), np.concatenate, ...).")
    if stop_gradient_value:
        parts.append(
            ("Or f" if kept else "f") + " wrote into the value of pullback.stop_gradient(x) (or a view of it), which "
            "is read-only: without pullback it is x itself, so the write would change x, which the gradient could "
            "not follow. Write into a copy (`s = pullback.stop_gradient(x).copy()`), or write into x itself "
            "(a recorded write, which the value then shows).")
    error = ValueError(" ".join(parts))
    error.pullback_named = True
    return error
