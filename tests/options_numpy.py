"""The positional/keyword samples of the NumPy-coverage rules, for tests/test_rules_options.py: each
`same(...)` records calls that plain NumPy treats as the same; `add_samples` returns the callables
none of whose arguments can be given both ways, with the reason."""

import numpy as np


def add_samples(same, C, X, Y, Z):
    rng = np.random.default_rng(7)
    M = rng.normal(size=(3, 4)) + np.arange(12).reshape(3, 4) * 0.1
    V = np.array([0.3, -1.2, 2.1, 0.8, 1.7])
    W = np.array([1.4, 0.2, -0.6, 2.5, -1.9])
    P = np.array([1.0, -2.0, 0.5])
    Q = np.array([3.0, 0.5])
    S3 = rng.normal(size=(2, 3, 4))
    NAN = M.copy()
    NAN[0, 1] = NAN[2, 3] = np.nan
    A = rng.normal(size=(3, 3)) + 3.0 * np.eye(3)

    # shape
    same(np.append, [M, M[:1]], C(X, Y, 0), C(X, Y, axis=0), C(arr=X, values=Y, axis=0))
    same(np.column_stack, [V, W], C([X, Y]), C(tup=[X, Y]))
    same(np.row_stack, [M, V[:4]], C([X, Y]), C(tup=[X, Y]))
    same(np.dstack, [M, M[::-1]], C([X, Y]), C(tup=[X, Y]))
    same(np.block, [M, M[:, :1]], C([[X, Y]]), C(arrays=[[X, Y]]))
    same(np.flipud, [M], C(X), C(m=X))
    same(np.fliplr, [M], C(X), C(m=X))
    same(np.rot90, [S3], C(X, 3, (2, 0)), C(X, k=3, axes=(2, 0)), C(m=X, k=3, axes=(2, 0)))
    same(np.rollaxis, [S3], C(X, 2, 1), C(X, axis=2, start=1), C(a=X, axis=2, start=1))
    same(np.delete, [M], C(X, [0, 2], 1), C(X, obj=[0, 2], axis=1), C(arr=X, obj=[0, 2], axis=1))
    same(np.insert, [M, V[:3]], C(X, 1, Y, 1), C(X, obj=1, values=Y, axis=1), C(arr=X, obj=1, values=Y, axis=1))
    same(np.resize, [V], C(X, (3, 4)), C(X, new_shape=(3, 4)), C(a=X, new_shape=(3, 4)))
    same(np.trim_zeros, [np.array([0.0, 0.0, 1.5, 0.0, -2.0, 0.0])], C(X, "f"), C(X, trim="f"), C(filt=X, trim="f"))
    same(np.broadcast_arrays, [V, M[:, :1]], C(X, Y), C(X, Y, subok=False))
    same(np.lib.stride_tricks.sliding_window_view, [M], C(X, (2, 3), (0, 1)), C(X, window_shape=(2, 3), axis=(0, 1)),
         C(x=X, window_shape=(2, 3), axis=(0, 1), subok=False, writeable=False))
    # reductions, scans and statistics
    for fn in (np.nanmax, np.nanmin):
        same(fn, [NAN], C(X, 1, None, True), C(X, axis=1, keepdims=True), C(a=X, axis=1, keepdims=True))
    same(np.nanprod, [NAN], C(X, 1, None, None, True), C(X, axis=1, keepdims=True), C(a=X, axis=1, keepdims=True))
    for fn in (np.nancumsum, np.nancumprod):
        same(fn, [NAN], C(X, 0), C(X, axis=0), C(a=X, axis=0))
    for fn in (np.nanvar, np.nanstd):
        same(fn, [NAN], C(X, 1, None, None, 1, True), C(X, axis=1, ddof=1, keepdims=True),
             C(a=X, axis=1, ddof=1, keepdims=True))
    same(np.ediff1d, [V, W[:2], W[2:]], C(X, Y, Z), C(X, to_end=Y, to_begin=Z), C(ary=X, to_end=Y, to_begin=Z))
    same(np.trapezoid, [M, np.cumsum(np.abs(V[:3])) + 0.5], C(X, Y, 1.0, 0), C(X, x=Y, axis=0),
         C(y=X, x=Y, axis=0))
    same(np.gradient, [M, np.array([0.0, 0.5, 1.7])], C(X, Y, 0.5), C(X, Y, 0.5, axis=None),
         C(X, Y, 0.5, edge_order=1))
    same(np.gradient, [M], C(X, 0.5, axis=-1, edge_order=2), C(X, 0.5, edge_order=2, axis=1))
    same(np.cov, [M, np.array([1.0, 2.0, 0.5, 1.5])], C(X, None, False, True, None, None, None),
         C(X, rowvar=False, bias=True), C(m=X, rowvar=False, bias=True))
    same(np.cov, [M, np.array([1.0, 2.0, 0.5, 1.5])], C(X, None, True, False, 0, [1, 2, 1, 1], Y),
         C(X, ddof=0, fweights=[1, 2, 1, 1], aweights=Y), C(m=X, ddof=0, fweights=[1, 2, 1, 1], aweights=Y))
    same(np.corrcoef, [M, M[::-1] ** 2], C(X, Y, False), C(X, y=Y, rowvar=False), C(x=X, y=Y, rowvar=False))
    for fn, q in ((np.quantile, [0.2, 0.7]), (np.percentile, [20.0, 70.0]), (np.nanquantile, 0.3),
                  (np.nanpercentile, 30.0)):
        data = NAN if fn in (np.nanquantile, np.nanpercentile) else M
        same(fn, [data], C(X, q, 1, None, False, "midpoint", True), C(X, q, axis=1, method="midpoint", keepdims=True),
             C(a=X, q=q, axis=1, method="midpoint", keepdims=True))
    for fn in (np.median, np.nanmedian):
        same(fn, [NAN if fn is np.nanmedian else M], C(X, 0, None, False, True), C(X, axis=0, keepdims=True),
             C(a=X, axis=0, keepdims=True))
    # products
    same(np.cross, [M[:, :3], V[:3]], C(X, Y, -1, -1, 0), C(X, Y, axisc=0), C(a=X, b=Y, axisc=0))
    # indexing
    same(np.select, [M, M * 2.0], C([M > 0.5], [X], Y), C(condlist=[M > 0.5], choicelist=[X], default=Y))
    same(np.compress, [M], C([True, False, True], X, 0), C([True, False, True], X, axis=0),
         C(condition=[True, False, True], a=X, axis=0))
    same(np.extract, [M], C(M > 0.3, X), C(condition=M > 0.3, arr=X))
    same(np.choose, [M, M ** 2], C(np.array([[0, 1, 3, 1]] * 3), [X, Y], None, "clip"),
         C(np.array([[0, 1, 3, 1]] * 3), [X, Y], mode="clip"), C(a=np.array([[0, 1, 3, 1]] * 3), choices=[X, Y],
                                                                mode="clip"))
    same(np.piecewise, [M], C(X, [M < 0.5], [np.sin, np.cos]), C(x=X, condlist=[M < 0.5], funclist=[np.sin, np.cos]))
    same(np.apply_along_axis, [M], C(np.cumsum, 1, X), C(np.cumsum, axis=1, arr=X), C(func1d=np.cumsum, axis=1, arr=X))
    same(np.apply_over_axes, [S3], C(np.sum, X, [0, 2]), C(np.sum, a=X, axes=[0, 2]), C(func=np.sum, a=X, axes=[0, 2]))

    def put_positional(arr, values):
        arr = arr * 1.0
        np.put_along_axis(arr, np.array([[1], [0], [3]]), values, 1)
        return arr

    def put_keywords(arr, values):
        arr = arr * 1.0
        np.put_along_axis(arr=arr, indices=np.array([[1], [0], [3]]), values=values, axis=1)
        return arr

    same(np.put_along_axis, [M, M[:, :1] * 3.0], C(X, Y), run=put_positional)
    same(np.put_along_axis, [M, M[:, :1] * 3.0], C(X, Y), run=put_keywords)
    # sorting and sets
    D = np.array([3.0, 1.0, 2.0, 3.0, 1.0, 5.0])
    for fn in (np.unique_values, np.unique_counts, np.unique_inverse, np.unique_all):
        same(fn, [D], C(X))  # x is positional-only at run time (its signature says otherwise)
    same(np.union1d, [D, W], C(X, Y), C(ar1=X, ar2=Y))
    same(np.intersect1d, [D, np.array([2.0, 7.0, 1.0])], C(X, Y, False, True), C(X, Y, return_indices=True),
         C(ar1=X, ar2=Y, return_indices=True))
    same(np.setdiff1d, [D, np.array([2.0, 7.0])], C(X, Y, False), C(X, Y, assume_unique=False), C(ar1=X, ar2=Y))
    same(np.setxor1d, [D, np.array([2.0, 7.0])], C(X, Y, False), C(X, Y, assume_unique=False), C(ar1=X, ar2=Y))
    same(np.sort_complex, [V], C(X), C(a=X))
    # pointwise
    same(np.sinc, [V], C(X), C(x=X))
    same(np.i0, [V], C(X), C(x=X))
    INF = np.array([np.nan, np.inf, -np.inf, 1.5])
    same(np.nan_to_num, [INF], C(X, True, 1.0, 9.0, -9.0), C(X, nan=1.0, posinf=9.0, neginf=-9.0),
         C(x=X, nan=1.0, posinf=9.0, neginf=-9.0))
    same(np.real_if_close, [V], C(X, 50), C(X, tol=50), C(a=X, tol=50))
    same(np.fix, [V], C(X, None), C(X, out=None), C(x=X))
    same(np.unwrap, [np.cumsum(V * 3.0)], C(X, 2.0, 0), C(X, discont=2.0, axis=0), C(p=X, discont=2.0, axis=0))
    for fn in (np.iscomplex, np.isreal, np.isneginf, np.isposinf):
        same(fn, [INF], C(X), C(x=X))
    OUT = np.array([-2.0, 0.5, 3.0, -0.7])  # outside the real domains: complex results
    for fn in (np.emath.sqrt, np.emath.log, np.emath.log2, np.emath.log10, np.emath.arctanh, np.emath.arcsin,
               np.emath.arccos):
        same(fn, [OUT], C(X), C(x=X))
    same(np.emath.logn, [np.array([3.0, 0.5]), OUT[:2]], C(X, Y), C(n=X, x=Y))
    same(np.emath.power, [OUT, np.array([0.5, 2.0, -1.5, 3.0])], C(X, Y), C(x=X, p=Y))
    # constructors
    same(np.linspace, [V[:2], W[:2]], C(X, Y, 4, False, True, None, 1), C(X, Y, num=4, endpoint=False, retstep=True,
                                                                          axis=1),
         C(start=X, stop=Y, num=4, endpoint=False, retstep=True, axis=1))
    same(np.logspace, [V[:2], W[:2]], C(X, Y, 3, True, 2.0, None, -1), C(X, Y, num=3, base=2.0, axis=-1),
         C(start=X, stop=Y, num=3, base=2.0, axis=-1))
    same(np.geomspace, [np.abs(V[:2]) + 0.5, np.abs(W[:2]) + 1.0], C(X, Y, 4, False), C(X, Y, num=4, endpoint=False),
         C(start=X, stop=Y, num=4, endpoint=False))
    same(np.vander, [V], C(X, 3, True), C(X, N=3, increasing=True), C(x=X, N=3, increasing=True))
    same(np.bincount, [V[:3]], C(np.array([0, 2, 2]), X, 4), C(np.array([0, 2, 2]), weights=X, minlength=4))
    # polynomials
    same(np.polyval, [P, V], C(X, Y), C(p=X, x=Y))
    for fn in (np.polyadd, np.polysub, np.polymul):
        same(fn, [P, Q], C(X, Y), C(a1=X, a2=Y))
    same(np.polydiv, [np.array([1.0, 2.0, -3.0, 4.0]), Q], C(X, Y), C(u=X, v=Y))
    same(np.polyder, [P], C(X, 2), C(X, m=2), C(p=X, m=2))
    same(np.polyint, [P, Q], C(X, 2, Y), C(X, m=2, k=Y), C(p=X, m=2, k=Y))
    XS = np.linspace(0.0, 1.0, 7)
    same(np.polyfit, [XS, np.sin(3.0 * XS)], C(X, Y, 2, None, False, None, True), C(X, Y, 2, cov=True),
         C(x=X, y=Y, deg=2, cov=True))
    same(np.poly, [V[:3]], C(X), C(seq_of_zeros=X))
    same(np.roots, [np.array([1.0, -1.0, -2.0])], C(X), C(p=X))
    # numpy.linalg
    same(np.linalg.cond, [A], C(X, 1), C(X, p=1), C(x=X, p=1))
    same(np.linalg.tensorinv, [A.reshape(3, 3, 1)], C(X, 1), C(X, ind=1), C(a=X, ind=1))
    same(np.linalg.tensorsolve, [A.reshape(3, 3, 1), V[:3]], C(X, Y, None), C(X, Y, axes=None), C(a=X, b=Y))

    return {
        np.unstack: "x is positional-only; axis= is keyword-only",
        np.matrix_transpose: "x is positional-only",
        np.linalg.matrix_transpose: "x is positional-only",
        np.cumulative_sum: "x is positional-only; the options are keyword-only",
        np.cumulative_prod: "x is positional-only; the options are keyword-only",
        np.astype: "x and dtype are positional-only; copy= and device= are keyword-only",
        np.linalg.vecdot: "x1 and x2 are positional-only; axis= is keyword-only",
        np.linalg.outer: "x1 and x2 are positional-only",
        np.linalg.tensordot: "x1 and x2 are positional-only; axes= is keyword-only",
        np.linalg.cross: "x1 and x2 are positional-only; axis= is keyword-only",
        np.linalg.svdvals: "x is positional-only",

    }
