"""Inputs for the SciPy rules, shared by their tests and the registry-driven dot-product test
(tests/test_forward_coverage.py): for each scipy.special ufunc added with its rule, where it is
smooth and which of its arguments are plain numbers (orders, degrees, counts)."""

import numpy as np

# ufunc name -> one entry per argument: a plain number, or the (low, high) a differentiable argument is drawn from
SPECIAL = {
    "expm1": ((-2, 2),), "log1p": ((-0.5, 2),), "exp2": ((-2, 2),), "exp10": ((-1, 1),), "cbrt": ((0.3, 3),),
    "sindg": ((-200, 200),), "cosdg": ((-200, 200),), "tandg": ((-80, 80),), "cotdg": ((10, 170),),
    "dawsn": ((-3, 3),), "erfi": ((-1.5, 1.5),), "exp1": ((0.2, 3),), "expi": ((0.2, 3),), "entr": ((0.1, 3),),
    "exprel": ((-3, 3),), "loggamma": ((0.2, 5),), "ndtri_exp": ((-6, -0.1),), "k0": ((0.3, 3),),
    "k1": ((0.3, 3),), "k0e": ((0.3, 3),), "k1e": ((0.3, 3),), "wrightomega": ((-2, 3),), "spence": ((0.2, 3),),
    "ellipk": ((-2, 0.9),), "ellipkm1": ((0.05, 0.9),), "ellipe": ((-2, 0.9),),
    "ber": ((0.5, 4),), "bei": ((0.5, 4),), "ker": ((0.5, 4),), "kei": ((0.5, 4),),
    "berp": ((0.5, 4),), "beip": ((0.5, 4),), "kerp": ((0.5, 4),), "keip": ((0.5, 4),),
    "kv": (1.5, (0.5, 3)), "kn": (2, (0.5, 3)), "kve": (0.7, (0.5, 3)), "jve": (1.5, (0.5, 5)),
    "yve": (0.5, (0.5, 5)), "struve": (1.5, (0.5, 4)), "modstruve": (0.5, (0.5, 3)), "expn": (3, (0.3, 3)),
    "hyp0f1": (1.5, (-3, 3)), "hyp1f1": (0.7, 1.9, (-2, 2)), "hyperu": (0.7, 1.3, (0.5, 3)),
    "hyp2f1": (0.6, 1.3, 2.1, (-0.8, 0.8)), "wright_bessel": (0.5, 1.5, (0.1, 3)),
    "log_wright_bessel": (0.5, 1.5, (0.1, 3)),
    "kl_div": ((0.2, 2), (0.2, 2)), "rel_entr": ((0.2, 2), (0.2, 2)), "huber": ((0.5, 1.5), (-3, 3)),
    "pseudo_huber": ((0.5, 1.5), (-3, 3)), "powm1": ((0.3, 2), (-2, 2)), "boxcox": ((0.3, 3), (-1.5, 1.5)),
    "boxcox1p": ((-0.5, 2), (-1.5, 1.5)), "inv_boxcox": ((0.1, 1), (-0.5, 1.5)), "inv_boxcox1p": ((0.1, 1), (-0.5, 1.5)),
    "owens_t": ((-2, 2), (-2, 2)), "binom": ((3, 6), (0.5, 2.5)), "radian": ((-90, 90), (-30, 30), (-30, 30)),
    "agm": ((0.3, 3), (0.3, 3)), "ellipkinc": ((-1.3, 1.3), (-1, 0.9)), "ellipeinc": ((-1.3, 1.3), (-1, 0.9)),
    "elliprf": ((0.2, 2), (0.2, 2), (0.2, 2)), "elliprc": ((0.2, 2), (0.2, 2)), "tklmbda": ((-1, 1), (-0.4, 0.4)),
    "_ufuncs._riemann_zeta": ((1.5, 4),), "zetac": ((1.5, 4),), "itstruve0": ((0.3, 3),), "it2struve0": ((0.5, 3),),
    "itmodstruve0": ((0.3, 3),), "_ufuncs._zeta": ((1.5, 4), (0.5, 3)),
    "gammaincinv": ((0.5, 3), (0.1, 0.9)), "gammainccinv": ((0.5, 3), (0.1, 0.9)),
    "betaincinv": ((0.5, 3), (0.5, 3), (0.1, 0.9)), "betainccinv": ((0.5, 3), (0.5, 3), (0.1, 0.9)),
    "chdtr": ((1, 5), (0.5, 4)), "chdtrc": ((1, 5), (0.5, 4)), "chdtri": ((1, 5), (0.1, 0.9)),
    "pdtr": (3, (0.5, 5)), "pdtrc": (3, (0.5, 5)), "pdtri": (3, (0.1, 0.9)),
    "bdtr": (3, 9, (0.1, 0.9)), "bdtrc": (3, 9, (0.1, 0.9)), "bdtri": (3, 9, (0.1, 0.9)),
    "nbdtr": (3, 4, (0.1, 0.9)), "nbdtrc": (3, 4, (0.1, 0.9)), "nbdtri": (3, 4, (0.1, 0.9)),
    "fdtr": ((1, 6), (2, 8), (0.3, 3)), "fdtrc": ((1, 6), (2, 8), (0.3, 3)), "fdtri": ((1, 6), (2, 8), (0.1, 0.9)),
    "gdtr": ((0.5, 2), (0.5, 3), (0.3, 3)), "gdtrc": ((0.5, 2), (0.5, 3), (0.3, 3)),
    "gdtrix": ((0.5, 2), (0.5, 3), (0.1, 0.9)), "stdtrit": ((1, 8), (0.1, 0.9)),
    "nrdtrimn": ((0.1, 0.9), (0.5, 2), (-2, 2)), "nrdtrisd": ((-1, 1), (0.55, 0.95), (1.5, 3)),
    "eval_legendre": (3, (-1, 1)), "eval_chebyt": (4, (-1, 1)), "eval_chebyu": (3, (-1, 1)),
    "eval_chebyc": (3, (-2, 2)), "eval_chebys": (4, (-2, 2)), "eval_sh_legendre": (3, (0, 1)),
    "eval_sh_chebyt": (3, (0, 1)), "eval_sh_chebyu": (3, (0, 1)), "eval_hermite": (4, (-2, 2)),
    "eval_hermitenorm": (3, (-2, 2)), "eval_laguerre": (3, (0, 3)), "eval_genlaguerre": (3, 0.7, (0, 3)),
    "eval_gegenbauer": (3, 0.8, (-1, 1)), "eval_jacobi": (3, 0.5, 1.2, (-1, 1)),
    **{f"_ufuncs._spherical_{kind}{d}": (2, (0.5, 4)) for kind in ("jn", "yn", "in", "kn") for d in ("", "_d")},
    "eval_sh_jacobi": (3, 2.5, 1.5, (0, 1)), "lpmv": (1, 2.5, (-0.9, 0.9)),
    "voigt_profile": ((-2, 2), (0.5, 1.5), (0.2, 1.5)), "kolmogorov": ((0.4, 2),), "kolmogi": ((0.1, 0.9),),
    "smirnov": (5, (0.1, 0.8)), "smirnovi": (5, (0.1, 0.9)), "besselpoly": ((0.2, 2), 1.5, 2.5),
    "chndtr": ((0.5, 4), 3.0, (0.5, 2)), "chndtrix": ((0.2, 0.8), 3.0, (0.5, 2)), "chndtrinc": ((3, 5), 3.0, (0.2, 0.5)),
    # inverses in a shape parameter
    "chdtriv": ((0.2, 0.8), (1, 4)), "gdtria": ((0.2, 0.8), (0.5, 3), (0.5, 3)), "gdtrib": ((0.5, 2), (0.2, 0.8), (0.5, 3)),
    "btdtria": ((0.2, 0.8), (0.5, 3), (0.2, 0.8)), "btdtrib": ((0.5, 3), (0.2, 0.8), (0.2, 0.8)),
    "stdtridf": ((0.6, 0.9), (1, 3)), "pdtrik": ((0.2, 0.8), (1, 5)), "bdtrik": ((0.2, 0.8), (8, 12), (0.2, 0.5)),
    "bdtrin": ((2, 4), (0.2, 0.8), (0.2, 0.5)), "nbdtrik": ((0.2, 0.8), (2, 5), (0.3, 0.7)),
    "nbdtrin": ((2, 4), (0.2, 0.8), (0.3, 0.7)), "fdtridfd": ((1.8, 2.2), (0.4, 0.6), (1.4, 1.6)),
}
_INVERSES = ("chdtriv", "gdtria", "gdtrib", "btdtria", "btdtrib", "stdtridf", "pdtrik", "bdtrik", "bdtrin", "nbdtrik",
             "nbdtrin", "fdtridfd")

# Shapes the differentiable arguments are drawn in, in turn: they broadcast together.
SHAPES = ((3, 2), (2,), (3, 1))

# Arguments whose derivative is computed by quadrature (first order only): (name, position)
FIRST_ORDER_ONLY = {
    ("_ufuncs._riemann_zeta", 0), ("zetac", 0), ("_ufuncs._zeta", 0), ("gammaincinv", 0), ("gammainccinv", 0), ("betaincinv", 0),
    ("betaincinv", 1), ("betainccinv", 0), ("betainccinv", 1), ("chdtr", 0), ("chdtrc", 0), ("chdtri", 0),
    ("fdtr", 0), ("fdtr", 1), ("fdtrc", 0), ("fdtrc", 1), ("fdtri", 0), ("fdtri", 1), ("gdtr", 1), ("gdtrc", 1),
    ("gdtrix", 1), ("stdtrit", 0), ("voigt_profile", 0), ("voigt_profile", 1), ("voigt_profile", 2),
    ("smirnov", 1), ("smirnovi", 1),
    *((name, k) for name in _INVERSES for k in range(len(SPECIAL[name]))),
}


def ufunc(sp, name):
    fn = sp
    for part in name.split("."):
        fn = getattr(fn, part)
    return fn


def special_call(sp, name, spec=None):
    """(f of the differentiable arguments only, their (low, high) ranges) for `scipy.special.<name>`."""
    spec = SPECIAL[name] if spec is None else spec
    fn = ufunc(sp, name)
    slots = [k for k, s in enumerate(spec) if isinstance(s, tuple)]

    def f(*diff):
        args = list(spec)
        for k, value in zip(slots, diff):
            args[k] = value
        return fn(*args)

    return f, [spec[k] for k in slots]


def draw(rng, ranges, shapes=SHAPES):
    return tuple(rng.uniform(low, high, shape) for (low, high), shape in zip(ranges, shapes))


def special_ufunc_cases(name, default):
    """The dot-product cases of `scipy.special.<name>`'s rule: from `SPECIAL`, else `default(ufunc)`."""
    import scipy.special as sp

    if name not in SPECIAL:
        return [default(ufunc(sp, name))]
    f, ranges = special_call(sp, name)
    return [(f, lambda rng: draw(rng, ranges))]


# label -> [(f, make inputs from an rng)] for the rules of the SciPy stand-ins (filled in below)
CASES = {}


def _normal(*shapes):
    return lambda rng: tuple(rng.normal(size=s) for s in shapes)


def _uniform(low, high, *shapes):
    return lambda rng: tuple(rng.uniform(low, high, s) for s in shapes)


def _special_output(name, k, *plain):
    def f(x):
        from pullback.rules import special

        return getattr(special, name)(*plain, x)[k]

    return f


# scipy.special's ufuncs with several outputs: name -> (output labels, plain leading arguments, (low, high) of x)
SEVERAL_OUTPUTS = {
    "sici": (("si", "ci"), (), (0.3, 3)), "shichi": (("shi", "chi"), (), (0.3, 2)), "fresnel": (("s", "c"), (), (-2, 2)),
    "airy": (("ai", "aip", "bi", "bip"), (), (-2, 2)), "airye": (("eai", "eaip", "ebi", "ebip"), (), (0.2, 2)), "itairy": (("apt", "bpt", "ant", "bnt"), (), (0.2, 2)),
    "itj0y0": (("j0int", "y0int"), (), (0.3, 3)), "iti0k0": (("i0int", "k0int"), (), (0.3, 3)),
    "it2j0y0": (("j0int", "y0int"), (), (0.3, 3)), "it2i0k0": (("i0int", "k0int"), (), (0.3, 3)),
    "pbdv": (("d", "dp"), (1.5,), (-2, 2)), "pbvv": (("v", "vp"), (1.3,), (-2, 2)),
    "pbwa": (("w", "wp"), (0.6,), (-2, 2)),
}
for _name, (_labels, _plain, (_low, _high)) in SEVERAL_OUTPUTS.items():
    for _k, _label in enumerate(_labels):
        CASES[f"special.{_name}_{_label}_rule"] = [(_special_output(_name, _k, *_plain), _uniform(_low, _high, (3, 2)))]


def _ellipj(k):
    def f(u):
        from pullback.rules import special

        return special.ellipj(u, 0.4)[k]

    return f


for _k, _label in enumerate(("sn", "cn", "dn", "ph")):
    CASES[f"special.ellipj_{_label}_rule"] = [(_ellipj(_k), _uniform(-2, 2, (4,)))]


def _signal(name, *args, **kwargs):
    def f(*inputs):
        from pullback.scipy import signal

        return getattr(signal, name)(*inputs, *args, **kwargs)

    return f


CASES["scipy_signal.convolution_rule"] = [
    (_signal("convolve", "same"), _normal((5, 3), (2, 2))),
    (_signal("correlate", "valid", "direct"), _normal((6,), (3,))),
    (_signal("fftconvolve", "full", axes=1), _normal((2, 5), (1, 3))),
]


def _lfilter_with_state(b, a, x, zi):
    from pullback.scipy import signal

    y, zf = signal.lfilter(b, a, x, 0, zi)
    return np.concatenate([np.ravel(y), np.ravel(zf)])


CASES["scipy_signal.linear_filter_rule"] = [
    (_signal("lfilter"), lambda rng: (rng.normal(size=3), np.array([1.5, -0.3, 0.2]) + 0.05 * rng.normal(size=3),
                                      rng.normal(size=(2, 6)))),
    (_lfilter_with_state, lambda rng: (rng.normal(size=2), np.array([1.2, 0.4, -0.1]), rng.normal(size=(5, 2)),
                                       rng.normal(size=(2, 2)))),
]


def _linalg(name, *args):
    def f(*inputs):
        from pullback.scipy import linalg

        return getattr(linalg, name)(*inputs, *args)

    return f


def _well_conditioned(rng, n=3):
    return rng.normal(size=(n, n)) / (2 * n) + 2.0 * np.eye(n)


CASES["scipy_linalg.matrix_function_rule"] = [
    (_linalg("sqrtm"), lambda rng: (_well_conditioned(rng),)),
    (_linalg("logm"), lambda rng: (_well_conditioned(rng),)),
    (_linalg("fractional_matrix_power", 0.4), lambda rng: (_well_conditioned(rng) + np.triu(np.ones((3, 3))),)),
]
CASES["scipy_linalg.sylvester_rule"] = [
    (_linalg("solve_sylvester"), lambda rng: (_well_conditioned(rng), _well_conditioned(rng), rng.normal(size=(3, 2))[:, :1]
                                              @ np.ones((1, 3)) + rng.normal(size=(3, 3)))),
]



def _riccati(name):
    def f(a, b, q, r):
        from pullback.scipy import linalg

        return getattr(linalg, name)(a, b, q @ q.T + np.eye(3), r @ r.T + np.eye(2))

    return f


CASES["scipy_linalg.riccati_rule"] = [
    (_riccati(name), lambda rng: (rng.normal(size=(3, 3)), rng.normal(size=(3, 2)), rng.normal(size=(3, 3)),
                                  rng.normal(size=(2, 2)))) for name in ("solve_continuous_are", "solve_discrete_are")
]


def _ellipe_complement(p):
    from pullback.rules.special import _ellipe_complement

    return _ellipe_complement(p)


# E(1 - p), the part of ellipkm1's derivative differentiated in p itself; 1 - p near 0 too
CASES["special._ellipe_complement_rule"] = [(_ellipe_complement, lambda rng: (rng.uniform(1e-3, 1.4, 5),))]


def _zero_safe_product(a, b):
    from pullback.rules.special import _zero_safe_product

    return _zero_safe_product(a, b)


# a·b with 0·inf = 0 (elliprf's edge)
CASES["special._zero_safe_product_rule"] = [(_zero_safe_product, lambda rng: (rng.normal(size=4), rng.normal(size=4)))]
