"""What differs between the NumPy (2.2 and newer) and Python (3.10 and newer) versions pullback supports.

pullback computes what the installed NumPy computes, so where NumPy's own behaviour changed between
versions, a rule asks here (a probe run once at import) instead of comparing version numbers.
"""

import ast
import inspect

import numpy as np


def _empty_norms_are_zero():
    """Whether NumPy's norms take their maxima with initial=0, so that the inf-norm (and the matrix 1-, 2-
    and inf-norms) of an empty array is 0 (NumPy 2.3 and newer); NumPy 2.2 raises ValueError there."""
    try:
        return bool(np.linalg.norm(np.zeros(0), np.inf) == 0)
    except ValueError:
        return False


EMPTY_NORMS_ARE_ZERO = _empty_norms_are_zero()


def _pad_takes_a_dict():
    """Whether `np.pad` takes a dict mapping axes to widths (NumPy 2.3 and newer)."""
    try:
        np.pad(np.zeros(1), {0: 1})
    except TypeError:
        return False
    return True


PAD_TAKES_A_DICT = _pad_takes_a_dict()


def qualname_of(frame):
    """The qualified name of the function Python frame `frame` runs: its code's `co_qualname` (Python 3.11 and
    newer); on Python 3.10, `Class.name` for a method of the class of its `self` (or `cls`), else the name."""
    code = frame.f_code
    name = getattr(code, "co_qualname", None)
    if name is not None:
        return name
    local = frame.f_locals
    owner = local.get("self", local.get("cls")) if code.co_argcount else None
    if owner is not None:
        for klass in (owner if isinstance(owner, type) else type(owner)).__mro__:
            if getattr(klass.__dict__.get(code.co_name), "__code__", None) is code:
                return f"{klass.__qualname__}.{code.co_name}"
    return code.co_name


def signature_of(func):
    """`inspect.signature(func)`; for NumPy's C functions, which carry a signature Python reads only from NumPy
    2.4 (`np.dot`, `np.concatenate`), the one the first line of their docstring writes (`dot(a, b, out=None)`).
    Raises ValueError or TypeError where there is neither."""
    try:
        return inspect.signature(func)
    except ValueError:
        text = (getattr(func, "__doc__", None) or "").lstrip()
        name = getattr(func, "__name__", "")
        if not name or not text.startswith(name + "("):
            raise
    parts, depth, start = [], 0, len(name) + 1
    for at in range(start, len(text)):
        c = text[at]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                parts.append(text[start:at])
                break
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:at])
            start = at + 1
    else:
        raise ValueError(f"no signature found for {name!r}")
    kind, parameters = inspect.Parameter.POSITIONAL_OR_KEYWORD, []
    for k, part in enumerate(p.strip() for p in parts):
        if part == "/":
            parameters = [p.replace(kind=inspect.Parameter.POSITIONAL_ONLY) for p in parameters]
        elif part == "*":
            kind = inspect.Parameter.KEYWORD_ONLY
        elif part.startswith("*"):
            parameters.append(inspect.Parameter(part.lstrip("*"), inspect.Parameter.VAR_POSITIONAL))
            kind = inspect.Parameter.KEYWORD_ONLY
        elif part.startswith("["):  # `where(condition, [x, y], /)`: optional ones
            parameters += [inspect.Parameter(n.strip(), kind, default=None) for n in part.strip("[]").split(",")]
        elif part and part != "...":
            named, _, default = part.partition("=")
            named = named.strip() if named.strip().isidentifier() else f"_arg{k}"  # `(a1, a2, ...)`
            parameters.append(inspect.Parameter(named, kind, default=_literal(default) if default else inspect.Parameter.empty))
    return inspect.Signature(parameters, __validate_parameters__=False)


def _literal(text):
    """The value a default written in a docstring (`None`, `-1`, `'same_kind'`) stands for, else the text."""
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        return text.strip()


def _power_of_a_half_is_sqrt():
    """Whether `np.power(x, 0.5)` is `np.sqrt(x)` (nan at -inf), as the operator `x ** 0.5` of a float array
    is in every NumPy (NumPy 2.3 and newer); NumPy 2.2's np.power gives C's pow (inf at -inf)."""
    with np.errstate(all="ignore"):
        return bool(np.isnan(np.power(np.array([-np.inf]), 0.5))[0])


POWER_OF_A_HALF_IS_SQRT = _power_of_a_half_is_sqrt()
