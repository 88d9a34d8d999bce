"""`scipy.integrate.odeint` and `solve_ivp`, differentiable in the initial state, the times and
the parameters passed through `args`; `quad`, differentiable once in its limits and `args`; and
`trapezoid`, `cumulative_trapezoid` (in `y`, `x`, `dx`) and `simpson` (in `y`, `dx`). SciPy is
imported on first use. Inside `pb.jit`, calls on plain values are recorded whole (except
`solve_ivp`, whose result object a replay cannot rebuild, and `quad`, whose result is a tuple of
Python floats); derivatives of `odeint`, `solve_ivp` and `quad` cannot be compiled.

The solve itself is SciPy's, on plain arrays and with the arguments given, so the values are
SciPy's own. Derivatives come from the continuous adjoint method (Pontryagin; Chen et al.
2018, "Neural ordinary differential equations"). For a loss L of the outputs y(t_k), the
adjoint a(t) = dL/dy(t) solves, backwards in time and with SciPy again,

    da/dt = -(∂f/∂y)ᵀ a,    dg/dt = -(∂f/∂θ)ᵀ a,

jumping by dL/dy(t_k) at each output time; at t0, dL/dy0 = a(t0) and dL/dθ = g(t0). The
products aᵀ ∂f/∂y and aᵀ ∂f/∂θ are reverse sweeps (`pb.pullback`) through the user's function,
so `func` is ordinary NumPy code. Times: dy(t_k)/dt_k = f(y(t_k), t_k) and dL/dt0 =
-a(t0) · f(y0, t0). Unlike Chen et al., y(t) is not integrated backwards alongside a (that
blows up for stiff and strongly damped problems) but read from the solve's interpolant
(SciPy's dense output; odeint keeps none, so LSODA runs again through `solve_ivp`). The
adjoint system is then linear, and implicit methods get its exact Jacobian.

Forward mode (`pb.jvp`, and `pb.jacobian` when the inputs are fewer than the outputs) solves
the tangent equation dδ/dt = ∂f/∂y δ + ∂f/∂θ θ̇ forwards instead, with `pb.jvp` of `func`.

A complex state (`solve_ivp` with a complex `y0`, for the methods SciPy integrates it with)
follows the README's convention: the cotangent a of y stands for dy -> Re(a · dy), so the same
equations hold, the derivatives of real parameters and times being the real parts.

Accuracy: these are the derivatives of the exact solution, each computed by SciPy to the
solver's tolerances (the same method, `rtol` and `atol` as the solve); they are not the
derivatives of SciPy's discrete steps. They agree with finite differences of SciPy's output
only as far as the tolerances allow, so ask for tight ones (say `rtol=1e-10, atol=1e-10`).
Each right-hand side evaluation of a derivative's solve traces `func` and sweeps back through
it, so a gradient costs a few times the solve's own evaluations, each much dearer.

Not differentiable: `method`, `rtol`, `atol` and the other solver options. Under
differentiation `solve_ivp` refuses `events` and `dense_output` (pass the times wanted as
`t_eval`), `args` must hold the arrays and numbers themselves (not containers of them), and
derivatives of derivatives (`hessian`, a gradient of a gradient) raise an error.

>>> import numpy as np, pullback as pb
>>> from pullback.scipy import integrate
>>> def decay(y, t, k):
...     return -k * y
>>> t = np.array([0.0, 1.0])
>>> def final(k):
...     return integrate.odeint(decay, np.array([1.0]), t, args=(k,), rtol=1e-12, atol=1e-12)[-1, 0]
>>> g = pb.gradient(final, 0.5)[0]
>>> round(float(g), 8), round(float(-np.exp(-0.5)), 8)  # d/dk exp(-k t) at t = 1
(-0.60653066, -0.60653066)
"""

import numpy as np

from .. import jvp, pullback, tree
from .._extend import frule, primitive, rrule
from .._jit_trace import JitError
from .._standins import is_stand_in
from .._values import Traced, strip_all
from ..rules.special import scipy_call, scipy_valued, stand_in_among

__all__ = ["odeint", "solve_ivp", "quad", "trapezoid", "cumulative_trapezoid", "simpson"]

_ODEINT_TOL = 1.49012e-8  # odeint's default rtol and atol


def _scipy():
    import scipy.integrate

    return scipy.integrate


def odeint(func, y0, t, args=(), Dfun=None, col_deriv=0, full_output=0, ml=None, mu=None, rtol=None, atol=None,
           tcrit=None, h0=0.0, hmax=0.0, hmin=0.0, ixpr=0, mxstep=0, mxhnil=0, mxordn=12, mxords=5, printmessg=0,
           tfirst=False):
    """`scipy.integrate.odeint` (LSODA), differentiable in `y0`, `t` and the arrays and floats in `args`.

    >>> import numpy as np, pullback as pb
    >>> from pullback.scipy.integrate import odeint
    >>> t = np.array([0.0, 2.0])
    >>> pb.gradient(lambda y0: odeint(lambda y, t: -y, y0, t, rtol=1e-12, atol=1e-12)[-1, 0], np.array([1.0]))[0]
    array([0.13533528])
    """
    options = dict(Dfun=Dfun, col_deriv=col_deriv, ml=ml, mu=mu, rtol=rtol, atol=atol, tcrit=tcrit, h0=h0, hmax=hmax,
                   hmin=hmin, ixpr=ixpr, mxstep=mxstep, mxhnil=mxhnil, mxordn=mxordn, mxords=mxords,
                   printmessg=printmessg, tfirst=tfirst)
    plain_func = _plain_rhs(func, "odeint", "odeint(lambda y, t, k: -k * y, y0, t, args=(k,))")
    if not _holds_traced((y0, t, args)):
        return scipy_call(_scipy().odeint, plain_func, y0, t, args, full_output=full_output, **options)
    _refuse_jit("odeint", (y0, t, args))
    if not isinstance(args, tuple):
        raise TypeError(f"odeint: args must be a tuple, e.g. args=({args!r},); got {type(args).__name__}.")
    params = _parameters(args, "odeint")
    y0 = _array_in(y0)
    if np.ndim(y0) == 0:
        y0 = np.reshape(y0, (1,))
    t = _array_in(t)
    rhs = (lambda y, s, p: func(s, y, *p)) if tfirst else (lambda y, s, p: func(y, s, *p))
    tol = _ODEINT_TOL if rtol is None else rtol, _ODEINT_TOL if atol is None else atol
    problem = _Problem("odeint", rhs, "LSODA", *tol, np.inf if not hmax else hmax, params)

    def run(y0, t0, t1, times, params):
        y, info = _scipy().odeint(plain_func, y0, times, tuple(params), full_output=True, **options)
        problem.info = info
        if info["message"] != "Integration successful.":
            problem.failure = info["message"]

        def trajectory():  # odeint keeps no interpolant: LSODA again, through solve_ivp
            sol = _scipy().solve_ivp(lambda s, y: problem.f(y, s, params), (times[0], times[-1]), y0, "LSODA",
                                     dense_output=True, rtol=tol[0], atol=tol[1], max_step=problem.max_step)
            return sol.sol

        problem.trajectory = trajectory
        return np.array(times, dtype=float), y

    problem.run = run
    _, y = _solve(problem, y0, t[0], None, t, *params)
    return (y, problem.info) if full_output else y


def solve_ivp(fun, t_span, y0, method="RK45", t_eval=None, dense_output=False, events=None, vectorized=False,
              args=None, **options):
    """`scipy.integrate.solve_ivp`, differentiable in `y0`, `t_span`, `t_eval` and the arrays and floats in `args`.

    Returns SciPy's `OdeResult`, whose `t` and `y` carry the derivatives. Without `t_eval`
    the outputs lie at the solver's own steps, which move with the inputs; the derivatives
    are those of y at those times held fixed, except that the first and last follow `t_span`.

    >>> import numpy as np, pullback as pb
    >>> from pullback.scipy.integrate import solve_ivp
    >>> def final(k):
    ...     sol = solve_ivp(lambda t, y, k: -k * y, (0.0, 1.0), np.array([2.0]), args=(k,), rtol=1e-12, atol=1e-12)
    ...     return sol.y[0, -1]
    >>> round(float(pb.gradient(final, 1.0)[0]), 8), round(float(-2 * np.exp(-1.0)), 8)
    (-0.73575888, -0.73575888)
    """
    plain_fun = _plain_rhs(fun, "solve_ivp", "solve_ivp(lambda t, y, k: -k * y, t_span, y0, args=(k,))")
    if not _holds_traced((t_span, y0, t_eval, args)):
        return scipy_call(_scipy().solve_ivp, plain_fun, t_span, y0, method, t_eval, dense_output, events, vectorized,
                          args, **options)
    _refuse_jit("solve_ivp", (t_span, y0, t_eval, args))
    for name, value in (("events", events), ("dense_output", dense_output)):
        if value is not None and value is not False:
            raise NotImplementedError(
                f"solve_ivp: {name} cannot be differentiated (the event times and the interpolant are not "
                f"tracked). Pass the times you need as t_eval, or call it on plain values (pb.stop_gradient)."
            )
    params = _parameters(() if args is None else tuple(args), "solve_ivp")
    y0 = _array_in(y0)
    t_eval = None if t_eval is None else _array_in(t_eval)
    rtol, atol = options.get("rtol", 1e-3), options.get("atol", 1e-6)
    problem = _Problem("solve_ivp", lambda y, s, p: fun(s, y, *p), method, rtol, atol, options.get("max_step", np.inf),
                       params)

    def run(y0, t0, t1, times, params):
        def solve(times, dense):
            return _scipy().solve_ivp(plain_fun, (t0, t1), y0, method, times, dense, None, vectorized,
                                      None if args is None else tuple(params), **options)

        problem.result = sol = solve(times, False)
        if not sol.success:
            problem.failure = sol.message
        problem.trajectory = lambda: solve(None, True).sol  # the same steps again, keeping the interpolant
        problem.dtype = sol.y.dtype
        return sol.t, sol.y.T

    problem.run = run
    t, y = _solve(problem, y0, t_span[0], t_span[1], t_eval, *params)
    result = type(problem.result)(problem.result)
    result.t, result.y, result.sol = t, y.T, None
    return result


# --- the solve as one primitive ------------------------------------------------------
class _Problem:
    """One differentiated solve: the user's right-hand side, the solver settings, and what the solve left behind."""

    def __init__(self, name, rhs, method, rtol, atol, max_step, params):
        self.name, self.rhs, self.method = name, rhs, method
        # The adjoint and tangent states are not the solution's, so per-component tolerances become the tightest.
        self.rtol, self.atol, self.max_step = float(np.min(rtol)), float(np.min(atol)), max_step
        self.wanted = tuple(i for i, p in enumerate(params) if isinstance(p, Traced))
        self.run, self.trajectory, self.failure = None, None, None  # set by the solve
        self.info = self.result = self._dense = None
        self.dtype = np.dtype(float)  # the state's, set by the solve: complex for a complex y0 in solve_ivp

    @property
    def implicit(self):
        """Whether the method takes a Jacobian (SciPy's name, or a solver class)."""
        names = ("Radau", "BDF", "LSODA")
        if isinstance(self.method, str):
            return self.method in names
        return any(issubclass(self.method, getattr(_scipy(), n)) for n in names)

    def vector(self, y, t, params):
        """The user's f(y, t) as a flat vector (traced where its inputs are)."""
        out = self.rhs(y, t, params)
        if isinstance(out, (list, tuple)):
            out = np.concatenate([np.reshape(v, -1) for v in out])
        return np.reshape(out, -1)

    def f(self, y, t, params):
        return np.asarray(self.vector(y, t, params), dtype=self.dtype)

    def check(self):
        if self.failure is not None:
            raise RuntimeError(
                f"{self.name}: the solve did not succeed ({self.failure}), so its result has no derivative. "
                "Fix the solve first (a stiff problem wants method='Radau', 'BDF' or 'LSODA'; or allow more steps)."
            )

    def dense(self):
        """y(t) over the solve, as SciPy's interpolant; computed on first use and kept."""
        if self._dense is None:
            self._dense = self.trajectory()
        return self._dense

    def integrate(self, rhs, jac, t_from, t_to, z, t_eval=None):
        """z at t_to (or at each of t_eval, as rows) for dz/dt = rhs(t, z), with the solve's method and tolerances."""
        self.dense()  # before the solve starts: SciPy's LSODA cannot run inside another LSODA solve
        options = dict(method=self.method, rtol=self.rtol, atol=self.atol, max_step=self.max_step)
        if jac is not None and self.implicit:
            options["jac"] = jac
        sol = _scipy().solve_ivp(rhs, (t_from, t_to), z, t_eval=t_eval, **options)
        if not sol.success:
            raise RuntimeError(
                f"{self.name}: the derivative's solve from t={t_from} to t={t_to} failed ({sol.message}). "
                "A stiff problem wants method='Radau', 'BDF' or 'LSODA'."
            )
        return sol.y[:, -1] if t_eval is None else sol.y.T


@primitive
def _solve(problem, y0, t0, t1, t_eval, *params):
    """`(t, Y)` with `Y[k] = y(t[k])`: SciPy's solve on plain values (the solver's own steps when t_eval is None)."""
    return problem.run(y0, t0, t1, t_eval, params)


def _linearised(problem, y, t, params, wanted):
    """`back(a)`: [aᵀ ∂f/∂y, aᵀ ∂f/∂θ_i for the wanted θ_i] as one flat vector, at (y, t)."""

    def f(y, *chosen):
        return problem.vector(y, t, _replace(params, wanted, chosen))

    _, pull = pullback(f, y, *(params[i] for i in wanted))
    sizes = [np.size(y)] + [np.size(params[i]) for i in wanted]

    def back(a):
        parts = pull(a)
        return np.concatenate([np.zeros(s) if c is None else np.reshape(c, -1) for s, c in zip(sizes, parts)])

    return back


class _Linearisations:
    """`_linearised` at (y(t), t), remembered for the last few t: implicit steps revisit the same times."""

    def __init__(self, problem, params, wanted):
        self.problem, self.params, self.wanted = problem, params, wanted
        self.seen = {}

    def __call__(self, t):
        back = self.seen.get(t)
        if back is None:
            if len(self.seen) >= 16:
                self.seen.clear()
            back = self.seen[t] = _linearised(self.problem, self.problem.dense()(t), t, self.params, self.wanted)
        return back


def _rows(back, n):
    """The first n rows of the matrix whose vector-matrix products `back` computes."""
    return np.stack([back(e) for e in np.eye(n)])


def _adjoint(problem, y0, t0, times, g_y, params):
    """dL/dy0 and the flat dL/dθ (wanted parameters), from the cotangents g_y[k] of y(times[k])."""
    n, wanted = np.size(y0), problem.wanted
    size = n + sum(int(np.size(params[i])) for i in wanted)
    linearised = _Linearisations(problem, params, wanted)

    def rhs(t, z):
        return -linearised(t)(z[:n])

    def jac(t, z):  # the adjoint system is linear: [[-Jᵀ, 0], [-(∂f/∂θ)ᵀ, 0]]
        m = np.zeros((size, size), problem.dtype)
        m[:, :n] = -_rows(linearised(t), n).T
        return m

    z, now = np.zeros(size, problem.dtype), times[-1]
    for k in [*reversed(np.flatnonzero(np.any(g_y, axis=1))), None]:  # restart only where a jumps
        end = t0 if k is None else times[k]
        if end != now and np.any(z[:n]):
            z = problem.integrate(rhs, jac, now, end, z)
        now = end
        if k is not None:
            z[:n] += g_y[k]
    return z[:n], z[n:]


def _unflatten(flat, params, wanted):
    """The wanted parameters' cotangents, each shaped like its parameter; a real one's is the real part."""
    grads, start = [None] * len(params), 0
    for i in wanted:
        size = int(np.size(params[i]))
        part = np.reshape(flat[start:start + size], np.shape(params[i]))
        grads[i] = part if _is_complex(params[i]) else np.real(part)
        start += size
    return grads


def _is_complex(x):
    return np.iscomplexobj(x) if not isinstance(x, Traced) else x.dtype.kind == "c"


@rrule(_solve)
def _solve_rule(problem, y0, t0, t1, t_eval, *params):
    _plain_only(problem, (y0, t0, t1, t_eval, *params))
    t, y = _solve(problem, y0, t0, t1, t_eval, *params)

    def back(g):
        g_t, g_y = g
        _plain_only(problem, (g_t, g_y))
        problem.check()
        g_y = np.zeros(np.shape(y), y.dtype) if g_y is None else np.asarray(g_y, dtype=y.dtype)
        dy0, flat = _adjoint(problem, y0, t0, t, g_y, params)
        # A time t_k moves its output by f(y(t_k), t_k); the start t0 moves all of them by -Φ f(y0, t0).
        # Times are real: a complex state's cotangent c stands for Re(c · dy) (README, "Complex numbers").
        dt = np.array([np.real(g_y[k] @ problem.f(y[k], t[k], params)) if np.any(g_y[k]) else 0.0
                       for k in range(len(t))])
        if g_t is not None:
            dt = dt + g_t
        dt0, dt1 = -np.real(dy0 @ problem.f(y0, t0, params)), None
        if t_eval is None:  # the solver's own steps: only the ends move, with t_span
            dt0, dt1, dt = dt0 + dt[0], dt[-1], None
        return (None, dy0, dt0, dt1, dt, *_unflatten(flat, params, problem.wanted))

    return (t, y), back


@frule(_solve)
def _solve_frule(primals, tangents):
    problem, y0, t0, t1, t_eval, *params = primals
    _plain_only(problem, primals[1:])
    t, y = _solve(*primals)
    _, dy0, dt0, dt1, dt_eval, *dparams = tangents
    if all(d is None for d in tangents):
        return (t, y), None
    problem.check()
    if t_eval is not None:
        dt = np.zeros(len(t)) if dt_eval is None else np.asarray(dt_eval, dtype=float)
    else:  # the solver's own steps: only the ends move, with t_span
        dt = np.zeros(len(t))
        dt[0] += 0.0 if dt0 is None else dt0
        dt[-1] += 0.0 if dt1 is None else dt1
    delta = np.zeros(np.size(y0), y.dtype) if dy0 is None else np.array(dy0, dtype=y.dtype)
    if dt0 is not None:
        delta -= problem.f(y0, t0, params) * dt0
    dy = _tangent(problem, y0, t0, t, params, delta, dparams)
    dy += np.stack([problem.f(y[k], t[k], params) * dt[k] if dt[k] else np.zeros(np.size(y0)) for k in range(len(t))])
    no_time_tangent = dt_eval is None and (t_eval is not None or (dt0 is None and dt1 is None))
    return (t, y), (None if no_time_tangent else dt, dy)


def _tangent(problem, y0, t0, times, params, delta, dparams):
    """δ(times[k]) for dδ/dt = ∂f/∂y δ + Σ ∂f/∂θ_i θ̇_i and δ(t0) = delta: y's tangent at fixed times."""
    chosen = tuple(i for i, d in enumerate(dparams) if d is not None)
    moving = tuple(dparams[i] for i in chosen)

    def rhs(t, d):
        def f(y, *picked):
            return problem.vector(y, t, _replace(params, chosen, picked))

        out = jvp(f, (problem.dense()(t), *(params[i] for i in chosen)), (d, *moving))[1]
        return np.zeros(len(d), problem.dtype) if out is None else np.asarray(out, dtype=problem.dtype)

    linearised = _Linearisations(problem, params, ())

    def jac(t, d):
        return _rows(linearised(t), len(d))

    if times[-1] == t0 or not (np.any(delta) or chosen):
        return np.tile(delta, (len(times), 1))
    distinct = np.concatenate([[True], np.diff(times) != 0])  # odeint allows repeated times
    at = problem.integrate(rhs, jac, t0, times[-1], delta, t_eval=times[distinct])
    return at[np.cumsum(distinct) - 1]


# --- arguments ---------------------------------------------------------------------------
def _refuse_jit(name, values):
    """Derivatives inside `pb.jit`: the solves run SciPy on plain values during the backward pass, which a trace
    cannot record."""
    if stand_in_among(strip_all(values)) is not None:
        raise JitError(f"pullback.scipy.integrate.{name}: its derivatives cannot be compiled by pb.jit (SciPy solves "
                       "the adjoint equations on plain values). Differentiate outside the jitted function.")


def _holds_traced(x):
    return any(isinstance(leaf, Traced) for leaf in tree.leaves(x))


def _array_in(x):
    """`x` as a float array, kept traced; a list or tuple holding tracked numbers becomes one tracked array."""
    if isinstance(x, Traced) or is_stand_in(x):
        return x
    if isinstance(x, (list, tuple)) and _holds_traced(x):
        return np.stack([np.reshape(v, ()) for v in x])
    x = np.asarray(x)
    return x.astype(float) if x.dtype.kind in "biu" else x


def _plain_rhs(fun, name, example):
    """`fun` for SciPy, which calls it on plain values: a traced result can only come from outside its
    arguments (a closure or a global), and SciPy would convert it, losing the gradient; refused by name."""

    def plain(*arguments):
        out = fun(*arguments)
        if isinstance(out, Traced) or (isinstance(out, (list, tuple)) and _holds_traced(out)):
            raise TypeError(
                f"{name}: the right-hand side returned a value being differentiated although SciPy called it "
                "on plain values, so it reads one from outside its arguments (a closure or a global); the "
                f"solver would convert it and lose its gradient. Pass that value through args=, e.g. {example}."
            )
        return out

    return plain


def _parameters(args, name):
    for i, p in enumerate(args):
        if not isinstance(p, Traced) and _holds_traced(p):
            raise TypeError(
                f"{name}: args[{i}] is a {type(p).__name__} holding tracked values; only arrays and numbers "
                "in args are differentiated. Pass the arrays themselves, e.g. args=(w, b), or flatten "
                "a model with `flat, rebuild = pb.optim.destructure(model)` and pass flat."
            )
    return args


def _replace(params, positions, values):
    out = list(params)
    for i, v in zip(positions, values):
        out[i] = v
    return tuple(out)


def _plain_only(problem, values):
    if any(isinstance(v, Traced) for v in values):
        raise NotImplementedError(
            f"{problem.name} is differentiable once: its derivative is computed by SciPy on plain arrays, "
            "so it cannot itself be differentiated (as hessian, hvp or a gradient of a gradient would). "
            "Use finite differences of pb.gradient for second derivatives."
        )


# --- quadrature of sampled values ------------------------------------------------------------
def trapezoid(y, x=None, dx=1.0, axis=-1):
    """`scipy.integrate.trapezoid`, differentiable in `y`, `x` and `dx`.

    >>> import numpy as np, pullback as pb
    >>> pb.gradient(lambda y: trapezoid(y, dx=0.5), np.ones(3))[0]
    array([0.25, 0.5 , 0.25])
    """
    if not _holds_traced((y, x, dx)):
        return scipy_call(_scipy().trapezoid, y, x, dx, axis)
    value = np.trapezoid(_array_in(y), None if x is None else _array_in(x), dx, axis)
    return scipy_valued(value, _scipy().trapezoid, y, x, dx, axis)


def cumulative_trapezoid(y, x=None, dx=1.0, axis=-1, initial=None):
    """`scipy.integrate.cumulative_trapezoid`, differentiable in `y`, `x` and `dx`.

    >>> import numpy as np, pullback as pb
    >>> pb.gradient(lambda y: cumulative_trapezoid(y)[-1], np.ones(3))[0]
    array([0.5, 1. , 0.5])
    """
    scipys = _scipy().cumulative_trapezoid
    if not _holds_traced((y, x, dx)):
        return scipy_call(scipys, y, x, dx, axis, initial)
    scipy_call(scipys, strip_all(y), strip_all(x), strip_all(dx), axis, initial)  # SciPy's checks and messages
    y = _array_in(y)
    axis = axis % np.ndim(y)
    n = np.shape(y)[axis]
    upper = np.take(y, np.arange(1, n), axis=axis)
    lower = np.take(y, np.arange(0, n - 1), axis=axis)
    res = np.cumsum(_spacing(x, dx, axis, np.ndim(y)) * (upper + lower) / 2.0, axis=axis)
    if initial is not None:  # SciPy allows 0 only
        res = np.concatenate([np.zeros_like(np.take(res, np.arange(1), axis=axis)), res], axis=axis)
    return scipy_valued(res, scipys, y, x, dx, axis, initial)


def _spacing(x, dx, axis, ndim):
    """The widths between samples along `axis`: `dx`, or the differences of `x` (1-D, or shaped like y)."""
    if x is None:
        return dx
    x = _array_in(x)
    if np.ndim(x) == 1:
        shape = [1] * ndim
        shape[axis] = -1
        return np.reshape(np.diff(x), shape)
    return np.diff(x, axis=axis)


def simpson(y, x=None, *, dx=1.0, axis=-1):
    """`scipy.integrate.simpson`, differentiable in `y` and `dx` (it is linear in both); `x` must be plain.

    >>> import numpy as np, pullback as pb
    >>> pb.gradient(lambda y: simpson(y, dx=0.5), np.ones(3))[0]
    array([0.16666667, 0.66666667, 0.16666667])
    """
    scipys = _scipy().simpson
    if not _holds_traced((y, x, dx)):
        return scipy_call(scipys, y, x, dx=dx, axis=axis)
    if _holds_traced(x):
        raise NotImplementedError("pullback.scipy.integrate.simpson: the sample points x cannot be differentiated "
                                  "here; pass x as a plain array (pb.stop_gradient), or use trapezoid, which is "
                                  "differentiable in x.")
    if np.ndim(x) > 1:
        raise NotImplementedError("pullback.scipy.integrate.simpson on traced values takes 1-D sample points x; "
                                  "integrate each slice on its own.")
    y = _array_in(y)
    n = np.shape(y)[axis]
    # simpson is linear in y: its weights are its values on the unit vectors, along the last axis
    weights = scipy_call(scipys, np.eye(n), x, dx=1.0, axis=-1) if n else np.zeros(0)
    value = np.tensordot(np.moveaxis(y, axis, -1), weights, axes=1) * dx
    return scipy_valued(value, scipys, y, x, dx=dx, axis=axis)


# --- quadrature of a function ------------------------------------------------------------------
def quad(func, a, b, args=(), full_output=0, **options):
    """`scipy.integrate.quad`, differentiable once in the limits `a`, `b` and the arrays and floats in `args`.

    d/db = func(b), d/da = -func(a) and d/dθ = ∫ ∂func/∂θ dt (SciPy's `quad_vec` over pullback's gradient of
    `func`). A value being differentiated reaches `func` through `args`, not a closure.

    >>> import numpy as np, pullback as pb
    >>> db, dk = pb.gradient(lambda b, k: quad(lambda t, k: k * t, 0.0, b, args=(k,))[0], 2.0, 3.0)
    >>> db, round(dk, 12)  # k b, b² / 2
    (6.0, 2.0)
    """
    plain_func = _plain_rhs(func, "quad", "quad(lambda t, k: k * t, a, b, args=(k,))")
    args = args if isinstance(args, tuple) else (args,)  # as SciPy reads a single argument
    if not _holds_traced((a, b, args)):
        return scipy_call(_scipy().quad, plain_func, a, b, args, full_output, **options)
    if full_output or options.get("weight") is not None:
        raise NotImplementedError("pullback.scipy.integrate.quad on traced values: full_output and weight= are not "
                                  "differentiable here; integrate the weighted function itself.")
    if stand_in_among(strip_all((a, b, args))) is not None:
        raise JitError("pullback.scipy.integrate.quad: its derivatives cannot be compiled by pb.jit (SciPy integrates "
                       "on plain values). Differentiate outside the jitted function.")
    problem = _Integral(func, plain_func, options)
    value = _integral(problem, a, b, *_parameters(args, "quad"))
    return value, problem.error


class _Integral:
    """The integrand (as given, and checked for SciPy's plain calls), SciPy's options; the last error estimate."""

    def __init__(self, func, plain_func, options):
        self.func, self.plain_func, self.options, self.error = func, plain_func, options, None

    def scalar(self, t, params):
        return self.func(t, *params)

    def integrate(self, a, b, params):
        value, self.error = _scipy().quad(self.plain_func, a, b, params, **self.options)
        return value

    def parameter_gradient(self, a, b, params, wanted):
        """∫_a^b ∂func/∂θ_i dt for the wanted parameters, each shaped like its parameter."""
        def flat_gradient(t):
            grads = pullback(lambda *chosen: self.func(t, *_replace(params, wanted, chosen)),
                             *(params[i] for i in wanted))[1](1.0)
            return np.concatenate([np.zeros(np.size(params[i])) if g is None else np.ravel(g)
                                   for i, g in zip(wanted, grads)])

        tolerances = {k: self.options[k] for k in ("epsabs", "epsrel") if k in self.options}
        flat = _scipy().quad_vec(flat_gradient, a, b, **tolerances)[0]
        parts, start = [], 0
        for i in wanted:
            size = int(np.size(params[i]))
            parts.append(np.reshape(flat[start:start + size], np.shape(params[i])))
            start += size
        return parts


@primitive
def _integral(problem, a, b, *params):
    """∫_a^b func(t, *params) dt: SciPy's quad on plain values."""
    return problem.integrate(a, b, params)


def _first_order_only(values):
    if any(isinstance(v, Traced) for v in values):
        raise NotImplementedError("pullback.scipy.integrate.quad is differentiable once: its derivatives are "
                                  "computed by SciPy on plain values. Use finite differences of pb.gradient for "
                                  "second derivatives.")


def _integral_derivatives(problem, a, b, params, wanted):
    """(d/da, d/db, [d/dθ_i for the wanted i])."""
    _first_order_only((a, b, *params))
    return (-problem.scalar(a, params), problem.scalar(b, params),
            problem.parameter_gradient(a, b, params, wanted) if wanted else [])


@rrule(_integral)
def _integral_rule(problem, a, b, *params):
    value = _integral(problem, a, b, *params)
    wanted = [i for i, p in enumerate(params) if np.issubdtype(np.result_type(p), np.inexact)]

    def back(g):
        da, db, dparams = _integral_derivatives(problem, a, b, params, wanted)
        grads = [None] * len(params)
        for i, d in zip(wanted, dparams):
            grads[i] = g * d
        return (None, g * da, g * db, *grads)

    return value, back


@frule(_integral)
def _integral_frule(primals, tangents):
    problem, a, b, *params = primals
    _, ta, tb, *tparams = tangents
    value = _integral(problem, a, b, *params)
    wanted = [i for i, t in enumerate(tparams) if t is not None]
    da, db, dparams = _integral_derivatives(problem, a, b, params, wanted)
    tangent = 0.0
    if ta is not None:
        tangent = tangent + da * ta
    if tb is not None:
        tangent = tangent + db * tb
    for i, d in zip(wanted, dparams):
        tangent = tangent + np.sum(d * tparams[i])
    return value, tangent
