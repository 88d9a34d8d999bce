"""The built-in derivative rules, each in both modes (reverse and forward), one file per part of
the mathematics. Importing this package registers them, through `pb.rrule` and `pb.frule`.

- `ufuncs`: elementwise functions, the ufuncs (sin, exp, add, maximum, ...) and clip;
- `reductions`: sum, mean, prod, max, min, nansum, nanmax, nanmin, nanprod; all, any and counts (no gradient);
- `scans`: cumsum, cumprod, their nan and cumulative_ forms, diff, ediff1d, gradient, trapezoid;
- `statistics`: average, nanmean, var, std, nanvar, nanstd, ptp, cov, corrcoef, median, quantile, percentile;
- `shape`: reshape, transpose, joining (append, block, ...), splitting, flip, rot90, roll, tile, repeat, pad,
  delete, insert, resize, copies, casts, `*_like`;
- `indexing`: `x[index]`, in-place writes, where, take, take_along_axis, diagonals, triu, tril, select, choose,
  compress, extract, piecewise, put_along_axis, apply_along_axis, apply_over_axes;
- `inplace_writes`: fill_diagonal, copyto, put, place, putmask, writing into a tracked array;
- `sorting`: sort, partition, unique and the set operations; argsort, argmax, nonzero, searchsorted (no gradient);
- `products`: matmul, dot, vdot, inner, outer, tensordot, einsum, kron, multi_dot, matrix_power, cross, vecdot,
  matvec, vecmat;
- `norms`: linalg.norm, vector_norm, matrix_norm;
- `linalg`: inv, solve, det, slogdet, trace, pinv, lstsq; scipy.linalg's triangular, Cholesky and LU solves, expm;
- `decompositions`: cholesky, eigh, eigvalsh, svd, qr;
- `convolution`: convolve, correlate;
- `interpolation`: interp;
- `constructors`: linspace, logspace, geomspace, vander, bincount;
- `polynomials`: polyval, polyadd, polysub, polymul, polydiv, polyder, polyint, polyfit, poly, roots;
- `tensors`: svdvals, cond, tensorinv, tensorsolve;
- `pointwise`: sinc, i0, nan_to_num, real_if_close, fix, unwrap, divmod, modf, frexp;
- `fft`: the FFTs, on real and complex arrays;
- `scipy_sparse`: products of a constant scipy.sparse matrix with a traced array (`A @ x`, `x @ A`);
- `special`: scipy.special's ufuncs (registered once SciPy is imported), logsumexp, softmax, polygamma, ...

`table` builds docs/coverage.md from what they register; `_register` holds the shorthands they
register with.
"""

from . import (  # noqa: F401  (importing a rule file registers its rules)
    constructors,
    convolution,
    decompositions,
    fft,
    indexing,
    inplace_writes,
    interpolation,
    linalg,
    norms,
    pointwise,
    polynomials,
    products,
    reductions,
    scans,
    scipy_linalg,
    scipy_signal,
    scipy_sparse,
    scipy_spatial,
    shape,
    sorting,
    special,
    statistics,
    tensors,
    ufuncs,
)
