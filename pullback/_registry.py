"""The rule tables the tracer consults. Filled by `pullback.rules` and by users."""

# ufunc -> rule(*plain_inputs) -> (y, back)
UFUNC_RULES = {}

# ufuncs whose result is piecewise constant or not a float (comparisons, sign, floor, ...):
# they are computed on plain values and carry no gradient.
NONDIFF_UFUNCS = set()

# NumPy/SciPy callable -> implementation(*args, **kwargs) run when a tracked value reaches it.
FUNCTIONS = {}

# function made opaque by `pb.primitive` -> rule(*plain_args, **kwargs) -> (y, back)
PRIMITIVE_RULES = {}


def qualified_name(fn):
    """`numpy.linalg.solve`-style name for messages."""
    module = getattr(fn, "__module__", None) or "numpy"
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return f"{module}.{name}"

# reverse rule -> frule(primals, tangents, **kwargs) -> (y, y_dot); `tangents[k]` is None when
# argument k carries no tangent, and `y_dot` may be None (a zero tangent).
FORWARD_RULES = {}
