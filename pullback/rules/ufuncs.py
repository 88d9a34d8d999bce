"""Rules for NumPy's elementwise functions, in both modes: the ufuncs, and `np.clip`.

Each derivative is written with NumPy calls, so it is itself differentiable (higher
order). Constants are Python floats, which are weak and never change a float32 dtype.
Cotangents keep the broadcast shape; the engine sums them down to each input.

Complex values follow one convention (see docs/conventions.md): a cotangent `c` of `z` stands
for `dz -> Re(c * dz)`. The reverse rule of a holomorphic function is then the same local
derivative as its forward rule (`c_z = c_y * f'(z)`, no conjugation), so `unary` serves both;
the functions that are not holomorphic (conjugate, absolute, sign, real, imag) have one rule
per mode. Ufuncs NumPy refuses for complex input (floor, arctan2, hypot, ...) raise NumPy's
own error.
"""

import math
import types

import numpy as np

from .._arrays import holds_foreign_array, zeros_as
from .._extend import primitive, rrule
from .._inplace import ViewLink, holds_array, register_view
from .._registry import BUILDERS, NUMBER_OPERAND_RULES
from .._standins import as_numpy_number, converted, dtype_of, is_jit_float_or_complex, is_number_stand_in, is_stand_in, power
from .._tangents import ELEMENTWISE_PULLBACKS, SPARE, PerOperand, Thunk, scaled, unthunk
from .._values import UFUNC_AT, Traced, stop_gradient
from ._register import add_tangents, composite, forward_rule, refuse_second_order_at_kink, rule, without_gradient


def unary(ufunc, derivative, notes="", factor=None):
    """Register `ufunc(x)` with local derivative `derivative(g, x)`, `(g, y)` or `(g, x, y)`, where
    `y = ufunc(x)` (linear in g, elementwise). Its parameter names say which of `x` and `y` it
    reads, and the tape keeps only those (`exp` keeps its output, `sin` its input).

    The same local derivative serves both modes: cotangent `derivative(dy, ...)` in reverse,
    tangent `derivative(dx, ...)` in forward, as the Jacobian of an elementwise map is diagonal.
    """
    reads = _reads(derivative, ("x", "y"))
    reads_one = reads[0] if len(reads) == 1 else None

    @rule(ufunc, args="x", notes=notes)
    def reverse(x):
        if type(x) not in _PLAIN:
            x = _recordable(x)
        if factor is not None and type(x) is np.ndarray and x.size > _BLOCK and x.dtype in _SAVED_FACTOR_DTYPES:
            return ufunc(x), factor(x)
        y = ufunc(x)
        if reads_one == 0:
            return y, lambda g: (derivative(g, x),)
        if reads_one == 1:
            return y, lambda g: (derivative(g, y),)
        if reads:
            return y, lambda g: (derivative(g, x, y),)
        return y, lambda g: (derivative(g),)

    @forward_rule(ufunc)
    def forward(primals, tangents):
        (x,), (t,) = primals, tangents
        if type(x) not in _PLAIN:
            x = _recordable(x)
        y = ufunc(x)
        return y, None if t is None else unthunk(derivative(t, *_pick(reads, (x, y))))

    # the pullbacks above use their cotangent once: the sweep may hand them a spare one (see `SPARE`)
    ELEMENTWISE_PULLBACKS.update(c for c in reverse.__code__.co_consts if isinstance(c, types.CodeType))


def binary(ufunc, da, db, notes=""):
    """Register `ufunc(a, b)` with cotangent maps `da(g, ...)` and `db(g, ...)` (None: no gradient),
    run only if needed; after `g` each takes the values it reads of `a`, `b` and `y = ufunc(a, b)`,
    by those names, and the tape keeps only the values the traced operands' maps read."""
    reads_a = _reads(da, ("a", "b", "y"))
    reads_b = None if db is None else _reads(db, ("a", "b", "y"))

    @rule(ufunc, args="x1" if db is None else "x1, x2", notes=notes)
    def reverse(a, b):
        # (Python's `**`, `power`, computes with a pb.jit stand-in for a Python number as Python does, recorded,
        # and its derivatives keep it weak beside a float32 cotangent: see `_power_da`)
        if (type(a) not in _PLAIN or type(b) not in _PLAIN) and ufunc is not power:
            a, b = _recordable(a, b)
        y = ufunc(a, b)
        values = (a, b, y)
        return y, PerOperand([
            None if type(a) in _CONSTANTS else _thunk_of(da, _pick(reads_a, values)),
            None if reads_b is None or type(b) in _CONSTANTS else _thunk_of(db, _pick(reads_b, values)),
        ])

    @forward_rule(ufunc)
    def forward(primals, tangents):
        (a, b), (ta, tb) = primals, tangents
        if (type(a) not in _PLAIN or type(b) not in _PLAIN) and ufunc is not power:
            a, b = _recordable(a, b)
        y = ufunc(a, b)
        values = (a, b, y)
        dot_a = None if ta is None else da(ta, *_pick(reads_a, values))
        dot_b = None if tb is None or db is None else db(tb, *_pick(reads_b, values))  # db None: zero a.e.
        return y, add_tangents(dot_a, dot_b)

    return reverse


# operands that are never a pb.jit stand-in for a Python number (checked first, as the common case)
_PLAIN = frozenset((np.ndarray, float, int, bool, complex, np.float64, np.float32))


def _recordable(*operands):
    """The operands of a ufunc, with each `pb.jit` stand-in for a Python float or complex made something NumPy
    computes with as it would with the number, recorded (NumPy would read the stand-in's value, fixed by a
    guard, and as a float64 array rather than a weak Python number):

    - beside Python numbers only, the NumPy number NumPy makes of it (np.float64, np.complex128);
    - beside a pb.jit array or a traced value, itself: they record it as a weak operand;
    - beside a plain NumPy array or scalar, its value, fixed by a guard (so a new value traces again).

    One operand is returned as it is, several as a tuple."""
    if any(is_jit_float_or_complex(x) for x in operands):
        operands = _numbers_made_recordable(operands)
    return operands[0] if len(operands) == 1 else operands


def _numbers_made_recordable(operands):
    if all(type(x) in _PYTHON_SCALARS or is_number_stand_in(x) for x in operands):
        return tuple(as_numpy_number(x) if is_jit_float_or_complex(x) else x for x in operands)
    if any(is_stand_in(x) or isinstance(x, Traced) for x in operands):
        return operands
    return tuple(x.__pullback_value__() if is_number_stand_in(x) else x for x in operands)


def _reads(derivative, names):
    """The positions in `names` of the values `derivative(g, ...)` takes after `g`, by its parameter names."""
    code = derivative.__code__
    taken = code.co_varnames[1:code.co_argcount]
    unknown = [n for n in taken if n not in names]
    if unknown:
        raise TypeError(f"{derivative.__qualname__} takes {unknown}; a derivative takes g and any of {names}")
    return tuple(names.index(n) for n in taken)


def _pick(positions, values):
    return tuple([values[k] for k in positions])


def _thunk_of(derivative, values):
    """`g -> Thunk(derivative, g, *values)`: the cotangent map of one operand, holding only `values`."""
    return lambda g: Thunk(derivative, g, *values)


# Python ints are never tracked, so their cotangent is never wanted. (Python floats can be:
# a float argument is tracked as itself, to keep its weak dtype.)
_CONSTANTS = (int, bool)
_PYTHON_SCALARS = (int, bool, float, complex)

LN2, LN10 = math.log(2.0), math.log(10.0)


def _nonzero(y):
    """`y` with its zeros replaced by ones: a divisor whose numerator is zero where `y` is."""
    return np.where(y == 0, 1.0, y)

# A backward pass on a large float32 array reads values saved long before, out of the cache, and
# NumPy's float32 sin and cos have run at less than half speed on such input on some machines
# (1.1 ms against 0.45 ms per 1,000,000 elements). `times_of` computes a derivative a cached block at
# a time, copied in (a copy streams at full speed) and multiplied out.
_FLOAT32 = np.dtype(np.float32)
_BLOCK = 1 << 16  # elements per block: 256 KB of float32, which the L2 cache holds
_ONES = {np.dtype(t): np.ones((), t) for t in (np.float32, np.float64)}
for _one in _ONES.values():
    _one.flags.writeable = False


def times_of(g, fn, x):
    """`g * fn(x)` for an elementwise `fn` (which takes `out=`), a cached block at a time where `x` is a
    large float32 array, and into `g` itself where the sweep holds no other reference to it.

    >>> x = np.linspace(0, 1, 3 * _BLOCK + 5, dtype=np.float32)
    >>> np.array_equal(times_of(np.ones_like(x), np.cos, x), np.cos(x))
    True
    """
    if type(x) is not np.ndarray or x.size <= _BLOCK or not (
            type(g) is np.ndarray and x.dtype is _FLOAT32 and g.dtype is _FLOAT32 and g.shape == x.shape
            and x.flags.c_contiguous and g.flags.c_contiguous):
        return g * fn(x)
    out = g if g is SPARE[0] else np.empty_like(x)
    scratch = np.empty(_BLOCK, x.dtype)
    flat_out, flat_x, flat_g = out.reshape(-1), x.reshape(-1), g.reshape(-1)
    for start in range(0, x.size, _BLOCK):
        block = scratch[:min(_BLOCK, x.size - start)]
        np.copyto(block, flat_x[start:start + _BLOCK])
        fn(block, out=block)
        np.multiply(flat_g[start:start + _BLOCK], block, out=flat_out[start:start + _BLOCK])
    return out


# On a large array, `sin` and `cos` compute their derivative (`cos x`, `sin x`) with the value and
# keep it in place of `x`, as a careful hand-written gradient does: the backward pass then only
# multiplies it in, where recomputing it there costs a transcendental pass over memory long out of
# the cache (measured on the 1,000,000-element chain: 78 ms against 92 ms for the gradient).
_SAVED_FACTOR_DTYPES = frozenset((np.dtype(np.float32), np.dtype(np.float64)))


def _times_saved(d, sign):
    """The pullback `g -> g * d * sign` of a unary function whose derivative `d` was computed forward;
    into `g` itself where the sweep holds no other reference to it (see `SPARE`)."""
    def back(g):
        if g is SPARE[0]:
            product = np.multiply(g, d, out=g)
        else:
            product = g * d
        return (product if sign == 1.0 else scaled(product, sign),)
    return back


# `back` above uses its cotangent once: the sweep may hand it a spare one
ELEMENTWISE_PULLBACKS.update(c for c in _times_saved.__code__.co_consts if isinstance(c, types.CodeType))


def _one_minus_square(y, out=None):
    """`1 - y²`, tanh's derivative from its output."""
    if out is None:
        # 1 as a 0-d array of y's dtype: what NumPy makes of the Python 1.0, at half the cost
        return (_ONES.get(y.dtype, 1.0) if type(y) is np.ndarray else 1.0) - y * y
    np.multiply(y, y, out=out)
    return np.subtract(1.0, out, out=out)


unary(np.negative, lambda g: scaled(g, -1.0))
unary(np.positive, lambda g: g)
unary(np.exp, lambda g, y: g * y)
unary(np.exp2, lambda g, y: g * y * LN2)
unary(np.expm1, lambda g, x: g * np.exp(x))  # not y + 1, which cancels for x < 0
unary(np.log, lambda g, x: g / x)
unary(np.log2, lambda g, x: g * (1.0 / LN2) / x)
unary(np.log10, lambda g, x: g * (1.0 / LN10) / x)  # not g / (x * LN10): x * LN10 overflows near the largest float
unary(np.log1p, lambda g, x: g / (x + 1.0))
unary(np.sqrt, lambda g, y: g / (2.0 * y))
unary(np.cbrt, lambda g, y: g / (3.0 * y * y))
unary(np.square, lambda g, x: 2.0 * g * x)
unary(np.reciprocal, lambda g, y: -g * y * y)
unary(np.sin, lambda g, x: times_of(g, np.cos, x), factor=lambda x: _times_saved(np.cos(x), 1.0))
unary(np.cos, lambda g, x: scaled(times_of(g, np.sin, x), -1.0), factor=lambda x: _times_saved(np.sin(x), -1.0))
unary(np.tan, lambda g, y: g * (1.0 + y * y))


def _root_of_one_minus_square(x):
    """`sqrt(1 - x²)`, the denominator of arcsin's and arccos's derivatives. For complex `x`, as
    `sqrt(1 - x) sqrt(1 + x)` with each factor made by negations, which keep the sign of a zero imaginary
    part: on the real axis beyond ±1 (the branch cuts) it picks the side NumPy's arcsin takes there."""
    if _is_complex(x):
        return np.sqrt(-(x - 1.0)) * np.sqrt(-(-x - 1.0))
    return np.sqrt(_one_minus_square_of(x))


def _one_minus_square_of(x):
    """`1 - x²` as `(1 - x)(1 + x)`: exact differences near ±1, where `1 - x * x` cancels."""
    return (1.0 - x) * (1.0 + x)


def _root_of_square_plus_one(x):
    """`sqrt(x² + 1)`, arcsinh's derivative's denominator; `|x|` where `x * x` overflows (it is `|x|` to rounding there)."""
    with np.errstate(over="ignore"):
        root = np.sqrt(x * x + 1.0)
    if _is_complex(x):
        return root
    return np.where(np.isinf(root), np.abs(x), root)


unary(np.arcsin, lambda g, x: g / _root_of_one_minus_square(x))
unary(np.arccos, lambda g, x: -g / _root_of_one_minus_square(x))
unary(np.arctan, lambda g, x: g / (1.0 + x * x))
unary(np.sinh, lambda g, x: g * np.cosh(x))
unary(np.cosh, lambda g, x: g * np.sinh(x))
unary(np.tanh, lambda g, y: times_of(g, _one_minus_square, y))
unary(np.arcsinh, lambda g, x: g / _root_of_square_plus_one(x))
# sqrt(x - 1) sqrt(x + 1): exact near 1, where x * x - 1 cancels, and no overflow of x * x
unary(np.arccosh, lambda g, x: g / (np.sqrt(x - 1.0) * np.sqrt(x + 1.0)))
# 1 / (1 - x²) as 1/2 (1 / (1 - x) + 1 / (1 + x)): exact differences near ±1, and at ±1 its own derivative is
# inf, not the NaN (0 · inf) of differentiating the product (1 - x)(1 + x)
unary(np.arctanh, lambda g, x: g * 0.5 / (1.0 - x) + g * 0.5 / (1.0 + x))
unary(np.fabs, lambda g, x: _fabs_derivative(g, x),
      "Gradient 0 at 0 (a subgradient). A Hessian through the kink raises (see conventions).")
unary(np.deg2rad, lambda g: g * (math.pi / 180.0))
unary(np.rad2deg, lambda g: g * (180.0 / math.pi))
unary(np.radians, lambda g: g * (math.pi / 180.0))
unary(np.degrees, lambda g: g * (180.0 / math.pi))


# --- functions of a complex value that are not holomorphic: one rule per mode ------------------
def _is_complex(x):
    return dtype_of(x).kind == "c"


def two_rules(ufunc, back, tangent, notes=""):
    """Register `ufunc(x)` with cotangent map `back(g, x, y)` and tangent map `tangent(t, x, y)`."""

    @rule(ufunc, args="x", notes=notes)
    def reverse(x):
        if type(x) not in _PLAIN:
            x = _recordable(x)
        y = ufunc(x)
        return y, lambda g: (back(g, x, y),)

    @forward_rule(ufunc)
    def forward(primals, tangents):
        (x,), (t,) = primals, tangents
        if type(x) not in _PLAIN:
            x = _recordable(x)
        y = ufunc(x)
        return y, None if t is None else tangent(t, x, y)


def _unit(x, r):
    """`x / r` with `r = |x|`, and 0 where x is 0 (NumPy's `np.sign` of a complex value)."""
    zero = r == 0
    return np.where(zero, 0.0, x / np.where(zero, 1.0, r))


def _abs_back(g, x, y):
    refuse_second_order_at_kink(x, lambda: x == 0, "np.abs")
    return g * np.conj(_unit(x, y)) if _is_complex(x) else g * np.sign(x)


def _abs_tangent(t, x, y):
    refuse_second_order_at_kink(x, lambda: x == 0, "np.abs")
    return np.real(np.conj(_unit(x, y)) * t) if _is_complex(x) else t * np.sign(x)


def _fabs_derivative(g, x):
    refuse_second_order_at_kink(x, lambda: x == 0, "np.fabs")
    return g * np.sign(x)


def _sign_back(g, x, y):
    if not _is_complex(x):
        return None  # piecewise constant
    r = np.abs(x)
    return _unit(g - np.real(g * y) * np.conj(y), r)


def _sign_tangent(t, x, y):
    if not _is_complex(x):
        return None
    return _unit(t - y * np.real(np.conj(y) * t), np.abs(x))


two_rules(np.conjugate, lambda g, x, y: np.conjugate(g), lambda t, x, y: np.conjugate(t))
two_rules(np.absolute, _abs_back, _abs_tangent, "Gradient 0 at 0 (a subgradient); of complex z, Re(conj(z) dz) / |z|."
          " A Hessian through the kink raises (see conventions).")
two_rules(np.sign, _sign_back, _sign_tangent, """Real input: no gradient (piecewise constant). Complex
          input: z / |z|, differentiable away from 0 (gradient 0 at 0).""")


@rule(np.add, args="x1, x2")
def add_rule(a, b):
    return a + b, lambda g: (g, g)


@forward_rule(np.add)
def add_frule(primals, tangents):
    a, b = primals
    return a + b, add_tangents(*tangents)


@rule(np.subtract, args="x1, x2")
def subtract_rule(a, b):
    if type(b) in _CONSTANTS:
        return a - b, lambda g: (g, None)
    return a - b, lambda g: (g, scaled(g, -1.0))


@forward_rule(np.subtract)
def subtract_frule(primals, tangents):
    (a, b), (ta, tb) = primals, tangents
    return a - b, add_tangents(ta, None if tb is None else -tb)


@rule(np.multiply, args="x1, x2")
def multiply_rule(a, b):
    # lazily; a Python-float factor (the common `x * 0.5`) may be carried on by the sweep
    return a * b, PerOperand([None if type(a) in _CONSTANTS else lambda g: scaled(g, b),
                              None if type(b) in _CONSTANTS else lambda g: scaled(g, a)])


@forward_rule(np.multiply)
def multiply_frule(primals, tangents):
    (a, b), (ta, tb) = primals, tangents
    return a * b, add_tangents(None if ta is None else ta * b, None if tb is None else tb * a)


divide_rule = binary(np.true_divide, lambda g, b: g / b, lambda g, b, y: -g * y / b)


# The same rules with an untraced Python number on one side (see NUMBER_OPERAND_RULES).
def _first(g):
    return g, None


def _second(g):
    return None, g


def _over_number(a, c):
    if type(a) not in _PLAIN:
        a = _recordable(a)
    return np.true_divide(a, c), lambda g: (g / c, None)


def _number_over(c, b):
    if type(b) not in _PLAIN:
        b = _recordable(b)
    y = np.true_divide(c, b)
    return y, lambda g: (None, -g * y / b)


NUMBER_OPERAND_RULES.update({
    add_rule: (lambda a, c: (a + c, _first), lambda c, b: (c + b, _second)),
    subtract_rule: (lambda a, c: (a - c, _first), lambda c, b: (c - b, lambda g: (None, scaled(g, -1.0)))),
    multiply_rule: (lambda a, c: (a * c, lambda g: (scaled(g, c), None)),
                    lambda c, b: (c * b, lambda g: (None, scaled(g, c)))),
    divide_rule: (_over_number, _number_over),
})


def _power_da(g, a, b):
    if type(b) is int and b == 2:  # the common square, kept cheap
        return 2.0 * g * a
    # b * a**(b - 1), with the exponent moved to 0 where b == 0 so that 0 ** -1 never appears.
    # Plain arithmetic on `b` keeps a Python-number exponent weak (no float64 from np.where); np.power
    # keeps NumPy's arithmetic where a and b are Python numbers (0.0 ** -0.5 is inf, not ZeroDivisionError).
    # A pb.jit stand-in for a Python number reaches here as it is from Python's `**`: np.power takes it
    # through `_recordable`.
    exponent = b - 1 + (b == 0)
    if type(a) not in _PLAIN or type(exponent) not in _PLAIN:
        return g * b * np.power(*_recordable(a, exponent))
    return g * b * np.power(a, exponent)


def _power_db(g, a, b, y):
    # d/db a**b = a**b log a; defined as 0 where a == 0 (the limit for b > 0).
    base = a + (a == 0)
    if _is_complex(y) and not _is_complex(a):
        base = base + 0j  # a real base of a complex power: NumPy takes the complex logarithm of it
    log_a = np.log(base if type(base) in _PLAIN else _recordable(base))
    if type(a) in _PYTHON_SCALARS or is_number_stand_in(a):  # np.log made a NumPy scalar; a Python base stays weak
        log_a = converted(log_a, complex if _is_complex(log_a) else float)
    product = g * y * log_a
    plain = stop_gradient(a)
    if (is_stand_in(plain) and not is_number_stand_in(plain) and dtype_of(plain).kind == "f") or (
            type(plain) is np.ndarray and plain.dtype.kind == "f" and (plain < 0).any()):  # (pb.jit: any base)
        # log a is NaN at a negative real base: where no change of b is asked (a zero tangent in forward mode,
        # a zero cotangent) the term is 0, not 0 * NaN, so `x ** p` with p held still keeps its derivative in x
        product = np.where(g == 0, 0.0, product)
    return product


_POWER_NOTES = "d/dx2 is taken as 0 where x1 == 0 (the limit for x2 > 0)."
binary(np.power, _power_da, _power_db, _POWER_NOTES)
binary(power, _power_da, _power_db, "Computed by the operator, with NumPy's shortcuts (`x ** 2` is np.square). "
       + _POWER_NOTES)
binary(np.float_power, _power_da, _power_db, _POWER_NOTES)


def _balanced(g, win, tie):
    """`g` where `win`, half of it where `tie`: the subgradient of max/min that splits ties.

    Masks multiply rather than select (`np.where` is several times slower here, and this is the
    backward pass of every relu): by the mask alone where no operand ties (common for real data, so
    a NumPy mask is checked first), else by one weight of 1, 1/2 or 0 in `g`'s dtype, which keeps an
    infinite `g` infinite where it counts.
    """
    if type(tie) is np.ndarray and not np.any(tie):
        return g * win
    dtype = dtype_of(g)
    return g * np.add(win, np.multiply(tie, 0.5, dtype=dtype), dtype=dtype)


_TIES = "Where x1 == x2 each gets half of the gradient."


def _only_nan(p, q):
    """Where `p` is NaN and `q` is not."""
    return np.isnan(p) & ~np.isnan(q)
# The comparisons are NumPy's ufuncs, not Python's operators: two Python complex numbers compare as NumPy
# orders them (lexicographically), where `>` would raise.
_gt, _lt, _eq = np.greater, np.less, np.equal
binary(np.maximum, lambda g, a, b: _balanced(g, _gt(a, b), _eq(a, b)), lambda g, a, b: _balanced(g, _gt(b, a), _eq(a, b)),
       _TIES)
binary(np.minimum, lambda g, a, b: _balanced(g, _lt(a, b), _eq(a, b)), lambda g, a, b: _balanced(g, _lt(b, a), _eq(a, b)),
       _TIES)
# fmax and fmin pick the operand that is not NaN: it gets the whole gradient
_FMAX_TIES = _TIES + " Where one operand is NaN, the other gets the gradient."
binary(np.fmax, lambda g, a, b: _balanced(g, _gt(a, b) | _only_nan(b, a), _eq(a, b)),
       lambda g, a, b: _balanced(g, _gt(b, a) | _only_nan(a, b), _eq(a, b)), _FMAX_TIES)
binary(np.fmin, lambda g, a, b: _balanced(g, _lt(a, b) | _only_nan(b, a), _eq(a, b)),
       lambda g, a, b: _balanced(g, _lt(b, a) | _only_nan(a, b), _eq(a, b)), _FMAX_TIES)


def _arctan2_derivative(g, a, b, side):
    """`g * side / (a² + b²)` for `side` a or b, with both scaled by max(|a|, |b|) first (by 1 where that is
    infinite), so that the squares neither overflow (|a| near 1e200) nor underflow (near 1e-200)."""
    # Where one operand is infinite the angle is flat (0 or ±pi/2 whatever the other): derivative 0, computed at
    # (0, 1), not inf / inf. (A Dask array's values are not looked at.)
    plain = [stop_gradient(v) for v in (a, b)]
    dtype = np.result_type(*(v if isinstance(v, (int, float, complex)) else dtype_of(v) for v in plain))
    with np.errstate(over="ignore"):  # (a Python number past the dtype's range, 1e300 beside float32, is inf there)
        a_in, b_in = (v.astype(dtype, copy=False) if hasattr(v, "astype") else np.asarray(v, dtype) for v in plain)
    one_infinite = np.isinf(a_in) != np.isinf(b_in)
    if holds_foreign_array(one_infinite) or np.any(one_infinite):
        a, b, side = (np.where(one_infinite, v, w) for v, w in ((0.0, a), (1.0, b), (0.0, side)))
    scale = np.maximum(abs(a), abs(b))  # builtin abs keeps a Python number weak beside float32
    scale = np.where(np.isinf(scale), 1.0, scale)
    a, b, side = a / scale, b / scale, side / scale
    return g * (side / (a * a + b * b)) / scale


binary(np.arctan2, lambda g, a, b: _arctan2_derivative(g, a, b, b), lambda g, a, b: -_arctan2_derivative(g, a, b, a))


def _hypot_derivative(g, side, y):
    """At (0, 0) the gradient is 0, the subgradient np.linalg.norm takes at zero (side / y would be 0 / 0)."""
    refuse_second_order_at_kink(side, lambda: y == 0, "np.hypot")
    return g * side / _nonzero(y)


binary(np.hypot, lambda g, a, y: _hypot_derivative(g, a, y), lambda g, b, y: _hypot_derivative(g, b, y),
       "At (0, 0) the gradient is 0 (a subgradient, as for np.linalg.norm). A Hessian through the kink raises "
       "(see conventions).")


def _logistic(g, d, exp):
    """`g / (1 + exp(d))`, the derivative of logaddexp(a, b) in a for d = b - a, as `e / (1 + e)` with `e = exp(-d)`
    where d > 0 and `1 / (1 + e)` with `e = exp(d)` elsewhere: e never overflows, at any order. (Not exp(a - y):
    y rounds off log 2 where a == b ~ 1e17, and about |y| ulps of a - y at |y| ~ 1e4; d is exact where a and b are close.)"""
    positive = stop_gradient(d) > 0
    e = exp(np.where(positive, -d, d))
    return g * (np.where(positive, e, 1.0) / (1.0 + e))


binary(np.logaddexp, lambda g, a, b: _logistic(g, b - a, np.exp), lambda g, a, b: _logistic(g, a - b, np.exp))
binary(np.logaddexp2, lambda g, a, b: _logistic(g, b - a, np.exp2), lambda g, a, b: _logistic(g, a - b, np.exp2))
binary(np.remainder, lambda g: g, lambda g, a, b: -g * np.floor_divide(a, b),
       "Derivatives of the smooth pieces; none exists at the jumps (x1 / x2 an integer).")
binary(np.fmod, lambda g: g, lambda g, a, b: -g * np.trunc(a / b),
       "Derivatives of the smooth pieces; none exists at the jumps.")
binary(np.copysign, lambda g, a, y: g * np.sign(a) * np.sign(y), None, "The sign x2 carries no gradient.")
binary(np.ldexp, lambda g, b: np.ldexp(g, b), None, "The exponent x2 is an integer.")  # g * 2**b, exactly
binary(np.nextafter, lambda g: g, None, """x1 moved by one ulp toward x2: it moves with x1 (derivative 1, as
       central differences see it); the direction x2 carries no gradient.""")


@rule(np.heaviside, args="x2", notes="""x2 is the value at x1 == 0, so d/dx2 is 1 there and 0
            elsewhere. No gradient flows to x1 (piecewise constant).""")
def heaviside_rule(x1, x2):
    y = np.heaviside(x1, x2)
    return y, lambda g: (None, None if type(x2) in _CONSTANTS else Thunk(lambda: g * (x1 == 0)))


@forward_rule(np.heaviside)
def heaviside_frule(primals, tangents):
    (x1, x2), (_, t2) = primals, tangents
    return np.heaviside(x1, x2), None if t2 is None else t2 * (x1 == 0)


# Piecewise constant or boolean: no gradient flows through these.
without_gradient(
    np.less, np.less_equal, np.greater, np.greater_equal, np.equal, np.not_equal,
    np.logical_and, np.logical_or, np.logical_xor, np.logical_not,
    np.isnan, np.isinf, np.isfinite, np.signbit, np.floor, np.ceil, np.trunc, np.rint,
    np.floor_divide, np.spacing,
)
without_gradient(np.round, np.around, np.isclose)


# --- clip ------------------------------------------------------------------------------------
@primitive
def clamp(x, low, high):
    """`np.clip(x, low, high)` with either bound None, as a primitive (differentiable in all three)."""
    return np.clip(x, low, high)


def _clip_masks(x, low, high):
    """Where `low` and where `high` bind. np.clip is min(max(x, low), high): `high` wins wherever it
    binds, even when low > high."""
    below = False if low is None else x < low
    if high is None:
        above = False
    else:
        above = x > high if low is None else np.where(below, low > high, x > high)
    return below, above


@rrule(clamp)
def clip_rule(x, low, high):
    y = clamp(x, low, high)

    def back(g):
        below, above = _clip_masks(x, low, high)
        return (
            Thunk(lambda: np.where(np.logical_or(below, above), 0.0, g)),
            None if low is None else Thunk(lambda: np.where(np.logical_and(below, np.logical_not(above)), g, 0.0)),
            None if high is None else Thunk(lambda: np.where(above, g, 0.0)),
        )

    return y, back


@forward_rule(clamp)
def clip_frule(primals, tangents):
    x, low, high = primals
    tx, tlow, thigh = tangents
    y = clamp(x, low, high)
    below, above = _clip_masks(x, low, high)
    return y, add_tangents(
        None if tx is None else np.where(np.logical_or(below, above), 0.0, tx),
        None if tlow is None else np.where(np.logical_and(below, np.logical_not(above)), tlow, 0.0),
        None if thigh is None else np.where(above, thigh, 0.0),
    )


@composite(np.clip, args="a, a_min, a_max", notes="""Bounds may be differentiated too; where `a`
           equals a bound the gradient goes to `a`. As in NumPy, `a_max` wins where the bounds cross.""")
def clip(a, a_min=None, a_max=None, out=None, *, min=None, max=None, **kwargs):
    if out is not None or kwargs:
        raise TypeError(f"numpy.clip: {'out=' if out is not None else ', '.join(f'{k}=' for k in kwargs)} is not "
                        "supported on tracked values; drop it and assign the result instead (y = np.clip(y, lo, hi)), or "
                        "write it into an existing array (z[...] = np.clip(y, lo, hi)).")
    low = a_min if min is None else min
    high = a_max if max is None else max
    return clamp(a, low, high)


# --- real and imaginary parts, and the angle -----------------------------------------------
@primitive
def real_part(z):
    """The real part of complex `z` (as a new array)."""
    return np.real(z)


@primitive
def imag_part(z):
    """The imaginary part of complex `z` (as a new array)."""
    return np.imag(z)


@rrule(real_part)
def _real_part_rule(z):
    return real_part(z), lambda g: (g,)  # Re(g dz) = g Re(dz) for a real g


@rrule(imag_part)
def _imag_part_rule(z):
    return imag_part(z), lambda g: (-1j * g,)  # Re(-i g dz) = g Im(dz)


@forward_rule(real_part)
def _real_part_frule(primals, tangents):
    return real_part(primals[0]), None if tangents[0] is None else np.real(tangents[0])


@forward_rule(imag_part)
def _imag_part_frule(primals, tangents):
    return imag_part(primals[0]), None if tangents[0] is None else np.imag(tangents[0])


@primitive
def complex_from_parts(real, imag, dtype):
    """The complex array of `dtype` with real part `real` and imaginary part `imag`, written as NumPy's
    `z.real = v` writes a part: no arithmetic, so an infinite part and a signed zero stay as they are
    (`re + 1j * im` makes 1j * inf nan+infj, and -0.0 + 0.0 is 0.0). Another library's arrays (which take no
    writes into a part) are combined by that arithmetic."""
    if holds_foreign_array(real) or holds_foreign_array(imag):
        return real + imag * 1j
    out = np.empty(np.broadcast_shapes(np.shape(real), np.shape(imag)), dtype)
    out.real = real
    out.imag = imag
    return out


@rrule(complex_from_parts)
def _complex_from_parts_rule(real, imag, dtype):
    return complex_from_parts(real, imag, dtype), lambda g: (np.real(g), -np.imag(g), None)  # dL = Re(g dz)


@forward_rule(complex_from_parts)
def _complex_from_parts_frule(primals, tangents):
    (real, imag, dtype), (t_real, t_imag) = primals, tangents[:2]
    y = complex_from_parts(real, imag, dtype)
    if t_real is None and t_imag is None:
        return y, None
    return y, complex_from_parts(0.0 if t_real is None else t_real, 0.0 if t_imag is None else t_imag, dtype)


BUILDERS["complex"] = complex_from_parts


class _PartLink(ViewLink):
    """Ties the real or imaginary part of a traced complex array to it, as NumPy's part is a view:
    a write to the array re-derives the part (`derive`); a write through the part is refused."""

    __slots__ = ("refusal", "derive")

    def __init__(self, z, which):
        parent = getattr(z, "_base", None)
        root = z if parent is None else parent.root
        super().__init__(root, parent, None, None, True)
        self._positions = np.arange(z.size).reshape(z.shape) if parent is None else parent.positions()
        self.derive = real_part if which == "real" else imag_part
        self.refusal = (f"Writing into the {which} part of a complex array being differentiated (z.{which}[i] = v, "
                        f"np.{which}(z)[i] = v) would change the array in NumPy, which pullback does not follow. "
                        f"Set the part on the whole array instead (z.{which} = new_part), or build it: "
                        + ("z = new_real + 1j * z.imag." if which == "real" else "z = z.real + 1j * new_imag."))


def _part_view(part, z, which):
    """`part` of traced complex `z`, tied to it as NumPy's view (read-only here)."""
    if isinstance(part, Traced) and holds_array(part) and holds_array(z):
        part._base = link = _PartLink(z, which)
        register_view(link.root, part)
    return part


@composite(np.real, args="val", notes="""Of a real tracked array: the array itself. Of a complex one:
           its real part (NumPy's view of it; writing through that view is refused).""")
def real(val):
    return _part_view(real_part(val), val, "real") if _is_complex(val) else val


@composite(np.imag, args="val", notes="""Of a real tracked array: plain zeros. Of a complex one: its
           imaginary part (NumPy's view of it; writing through that view is refused).""")
def imag(val):
    if _is_complex(val):
        return _part_view(imag_part(val), val, "imag")
    plain = stop_gradient(val)
    if not isinstance(plain, np.ndarray):
        return np.imag(plain)  # of a number: NumPy's (0.0 for a Python float, np.float32(0.0) for np.float32)
    zeros = zeros_as(plain, np.shape(plain))
    if type(zeros) is np.ndarray:
        zeros.flags.writeable = False  # as NumPy's np.imag of a real array
    return zeros


@composite(np.angle, args="z", notes="""Of complex z: arctan2(imag, real), with no derivative at 0
           (NaN there). Of a real array: 0 or pi, no gradient.""")
def angle(z, deg=False):
    if not _is_complex(z):
        return np.angle(stop_gradient(z), deg)
    a = np.arctan2(imag_part(z), real_part(z))
    return a * (180.0 / math.pi) if deg else a


# --- np.add.at and np.subtract.at: unbuffered scatter-adds ------------------------------------
@primitive
def add_at(a, positions, values):
    """A copy of `a` with `values[k]` added at its flat position `positions[k]`, in order, repeats included:
    `np.add.at` on a copy, so the sums are NumPy's own."""
    out = np.array(a, copy=True, order="C")
    np.add.at(out.reshape(-1), positions, values)
    return out


@rrule(add_at)
def _add_at_rule(a, positions, values):
    # take_along_axis, which dispatches on its indices: under pb.jit the positions may be traced where g is
    # a plain array (g[positions] and np.take would convert them)
    return add_at(a, positions, values), lambda g: (g, None, np.take_along_axis(np.reshape(g, -1), positions, 0))


@forward_rule(add_at)
def _add_at_frule(primals, tangents):
    (a, positions, values), (ta, _, tv) = primals, tangents
    y = add_at(a, positions, values)
    if ta is None and tv is None:
        return y, None
    base = zeros_as(y, np.shape(y)) if ta is None else ta
    return y, base if tv is None else add_at(base, positions, tv)


UFUNC_AT[np.add] = lambda a, positions, values: add_at(a, positions, values)
UFUNC_AT[np.subtract] = lambda a, positions, values: add_at(a, positions, -values)  # negation is exact
