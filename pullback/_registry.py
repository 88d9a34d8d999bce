"""The rule tables, keyed on the callable each rule serves: a NumPy or SciPy ufunc, a NumPy
function (anything that dispatches through `__array_function__`), one of the engine's
stand-ins for syntax (`x[i]`, `x[i] = v`, `x.astype(t)`), or a `pb.primitive`.

They are filled only through the registration functions of `pullback._extend`
(`pb.rrule`, `pb.frule`, `pb.primitive`, `composite`, `nondifferentiable`), by the
built-in rule files and by users alike, and read by the engine.
"""

# callable -> reverse rule(*plain_args, **kwargs) -> (y, back)
REVERSE_RULES = {}

# callable -> forward rule(primals, tangents, **kwargs) -> (y, y_dot); `tangents[k]` is None when
# argument k carries no tangent, and `y_dot` may be None (a zero tangent).
FORWARD_RULES = {}

# reverse rule -> the callable it serves (the last one registered, for a rule that serves several
# aliases, such as np.max and np.amax): the engine hands forward mode the reverse rule of an
# operation, and this finds the forward rule registered for the same callable.
SERVED_BY = {}

# What the engine dispatches on.
# ufunc -> its reverse rule (the same as in REVERSE_RULES)
UFUNC_RULES = {}

# reverse rule -> (its form for a Python-number second operand, its form for a Python-number first
# operand): `x * 0.5`, `1.0 - x`. Each computes what the rule computes, from the plain
# values, for a number not traced at the level recording it, and skips what the general rule builds
# for the number's side (which would be dropped): scalar arithmetic is the commonest operation.
NUMBER_OPERAND_RULES = {}

# ufuncs whose result is piecewise constant or not a float (comparisons, sign, floor, ...):
# they are computed on plain values and carry no gradient.
NONDIFF_UFUNCS = set()

# NumPy function or stand-in (and ufunc with a rule, called as a function) -> what runs, with the
# call's own arguments, when a traced value reaches it.
FUNCTIONS = {}


def forward_rule_of(rule):
    """The forward rule registered for the callable whose reverse rule is `rule` (None if none is).

    >>> import numpy as np
    >>> forward_rule_of(REVERSE_RULES[np.sin]) is FORWARD_RULES[np.sin]
    True
    """
    return FORWARD_RULES.get(SERVED_BY.get(rule))


def qualified_name(fn):
    """`numpy.linalg.solve`-style name for messages."""
    module = getattr(fn, "__module__", None) or "numpy"
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return f"{module}.{name}"

# method name -> function(x, *args, **kwargs): methods of another library's arrays (Dask's `x.rechunk`)
# that a value being differentiated answers with a rule
METHODS = {}

# what the values' own attributes need of the rules, registered by them: "complex" -> (real, imag, dtype) ->
# the complex array of those parts (for `z.real = v` and `z.imag = v`)
BUILDERS = {}

