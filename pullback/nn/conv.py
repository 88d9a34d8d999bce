"""Convolution and pooling on NHWC images: primitives with fast reverse rules.

Images are `(batch, height, width, channels)`; filters are
`(kernel_h, kernel_w, in_channels // groups, out_channels)` ("HWIO"). With channels last,
im2col is a strided copy whose rows are whole pixels, and a convolution is the matrix
product `(batch * out_h * out_w, kernel_h * kernel_w * in_channels) @ filter`, done a
cache-sized block of rows at a time.

Three primitives close under differentiation, so gradients of gradients work:

- `_conv(x, w)`: the convolution,
- `_conv_transpose(g, w)`: its adjoint in `x` (a convolution with the flipped filter for
  stride 1, otherwise one product and col2im over the kernel offsets),
- `_conv_filter(x, g)`: its adjoint in `w`.

Each one's rule is written with the other two. Pooling uses the same pattern: max pooling
scatters through `_pool_scatter`, whose adjoint is `_pool_gather`; mean pooling's adjoint
is `_mean_pool_adjoint`.

Geometry travels as keyword arguments in normal form: `stride=(sh, sw)`,
`padding=((top, bottom), (left, right))`, `dilation=(dh, dw)`, `groups=int`.
"""

import threading
from typing import Any, Literal

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .._arrays import speaks_nep18
from .._extend import frule, primitive, rrule
from .._standins import is_stand_in
from .._tangents import Thunk
from .._values import stop_gradient

__all__ = ["conv2d", "conv_transpose2d", "max_pool2d", "mean_pool2d", "conv_output_size", "normalise_padding"]

# Padding as the layers and functions take it: an int, `(ph, pw)`, `((top, bottom), (left, right))`,
# "same" or "valid".
Padding = int | tuple[int, int] | tuple[tuple[int, int], tuple[int, int]] | Literal["same", "valid"]


# --- geometry ----------------------------------------------------------------------------
def as_pair(v, name, minimum=None):
    """`v` (an int or a pair of ints) as a pair, each at least `minimum` if one is given.

    >>> as_pair(0, "stride", minimum=1)
    Traceback (most recent call last):
    ValueError: stride must be at least 1; got 0
    """
    pair = (int(v), int(v)) if isinstance(v, (int, np.integer)) else tuple(int(a) for a in v)
    if len(pair) != 2:
        raise ValueError(f"{name} should be an int or a pair of ints for 2-d images; got {pair}")
    if minimum is not None and min(pair) < minimum:
        raise ValueError(f"{name} must be at least {minimum}; got {v!r}")
    return pair


def check_groups(groups):
    """Refuse a `groups` that is not a positive int (before anything divides by it)."""
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ValueError(f"groups must be a positive int; got {groups!r}")


def normalise_padding(padding, kernel=None, dilation=(1, 1)):
    """Padding in normal form `((top, bottom), (left, right))`.

    Accepts an int, a pair `(ph, pw)`, the normal form itself, `"valid"` (no padding) or
    `"same"` (total `dilation * (kernel - 1)` per axis, the extra row or column at the end,
    so stride 1 keeps the size, as in Flux and PyTorch).

    >>> normalise_padding(1), normalise_padding("same", kernel=(4, 3))
    (((1, 1), (1, 1)), ((1, 2), (1, 1)))
    """
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0), (0, 0))
        if padding != "same":
            raise ValueError(f'padding should be an int, a pair, pairs of pairs, "same" or "valid"; got {padding!r}')
        if kernel is None:
            raise ValueError('padding="same" needs the kernel size')
        totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return tuple((t // 2, t - t // 2) for t in totals)
    if isinstance(padding, (int, np.integer)):
        normal = ((int(padding),) * 2,) * 2
    elif len(padding) == 2 and all(isinstance(p, (int, np.integer)) for p in padding):
        normal = tuple((int(p), int(p)) for p in padding)
    elif len(padding) == 2 and all(len(p) == 2 for p in padding):
        normal = tuple((int(a), int(b)) for a, b in padding)
    else:
        raise ValueError(f"padding should be an int, (ph, pw) or ((top, bottom), (left, right)); got {padding!r}")
    if min(min(p) for p in normal) < 0:
        raise ValueError(f"padding must not be negative; got {padding!r}")
    return normal


def conv_output_size(size: int, kernel: int, stride: int, padding: tuple[int, int], dilation: int) -> int:
    """Output height (or width) of a convolution or pooling along one axis.

    >>> conv_output_size(224, kernel=7, stride=2, padding=(3, 3), dilation=1)
    112
    """
    span = dilation * (kernel - 1) + 1
    return (size + padding[0] + padding[1] - span) // stride + 1


def _output_hw(shape, kernel, stride, padding, dilation):
    out = tuple(conv_output_size(shape[1 + a], kernel[a], stride[a], padding[a], dilation[a]) for a in range(2))
    if min(out) < 1:
        raise ValueError(
            f"The kernel {kernel} (dilation {dilation}) does not fit in images of size {shape[1:3]} "
            f"padded by {padding}; use a smaller kernel, more padding or bigger images."
        )
    return out


def _check_image(x, name):
    if np.ndim(x) != 4:
        raise ValueError(
            f"{name} expects images shaped (batch, height, width, channels); got shape {np.shape(x)}. "
            "For a single image use x[None]."
        )


# --- im2col and col2im ---------------------------------------------------------------------
def _pad(x, padding):
    """`x` with zero rows and columns around each image (no copy without padding)."""
    (top, bottom), (left, right) = padding
    if not (top or bottom or left or right):
        return x
    n, h, w, c = x.shape
    xp = np.zeros((n, h + top + bottom, w + left + right, c), dtype=x.dtype)
    xp[:, top:top + h, left:left + w] = x
    return xp


def _crop(xp, padding, h, w):
    (top, _), (left, _) = padding
    if xp.shape[1] == h and xp.shape[2] == w:
        return xp
    return np.ascontiguousarray(xp[:, top:top + h, left:left + w])


def _window_view(xp, kernel, out_hw, stride, dilation):
    """A read-only view `(n, out_h, out_w, kh, kw, c)` of every window of the padded images."""
    sn, sh, sw, sc = xp.strides
    shape = (xp.shape[0], out_hw[0], out_hw[1], kernel[0], kernel[1], xp.shape[3])
    strides = (sn, sh * stride[0], sw * stride[1], sh * dilation[0], sw * dilation[1], sc)
    return as_strided(xp, shape, strides, writeable=False)


# Columns are built and used a block at a time, each block about this many bytes: small
# enough to stay in the last-level cache between the copy and the product (measured: the
# first ResNet-18 stage at batch 8 runs 1.4x faster than with whole-batch columns), and
# the full columns array (470 MB for ResNet-18 at batch 8) is never allocated.
COLUMN_BLOCK_BYTES = 4 * 2**20
# ... but at least this many rows, so each block's product is still a big one (the filter
# gradient adds up one kh*kw*c x out product per block).
MIN_BLOCK_ROWS = 512


# Each thread keeps two buffers (up to this size each) for the scratch arrays of its convolutions: one for
# the block of columns being multiplied, one for a block's part of a filter's gradient. Fresh memory is
# expensive: with a new array for each block, every page of it was a page fault, a third of ResNet-18's
# gradient time at batch 1 in a process with the C library's default heap.
KEPT_SCRATCH_BYTES = 32 * 2**20
_scratch = threading.local()


def _scratch_array(use, shape, dtype):
    """A C-contiguous array of `shape` and `dtype` in this thread's buffer for `use` ("columns" or "filter")
    when it fits there, else a new one. The next call for the same use overwrites it."""
    size = int(np.prod(shape)) * dtype.itemsize
    kept = getattr(_scratch, use, None)
    if kept is None or kept.size < size:
        if size > KEPT_SCRATCH_BYTES:
            return np.empty(shape, dtype)
        kept = np.empty(size, np.uint8)
        setattr(_scratch, use, kept)
    return kept[:size].view(dtype).reshape(shape)


def _block_copy(window):
    """`window` as a C-contiguous array: itself if it is one, else a copy in the thread's column buffer."""
    if window.flags.c_contiguous:  # an unpadded 1x1, stride-1 convolution
        return window
    block = _scratch_array("columns", window.shape, window.dtype)
    np.copyto(block, window)
    return block


def _column_blocks(x, kernel, stride, padding, dilation):
    """Yield `(cols, (images, rows))`: im2col of a block of outputs, and where they lie in the output.

    `cols` is `(outputs in the block, kh * kw * c)`; `images` and `rows` are slices of the
    output's first two axes. Blocks are whole images when an image's columns are small,
    bands of output rows otherwise. Each block may be in the memory of the one before: use
    it before asking for the next, and keep nothing that refers to it.
    """
    n, c = x.shape[0], x.shape[3]
    out_hw = _output_hw(x.shape, kernel, stride, padding, dilation)
    view = _window_view(_pad(x, padding), kernel, out_hw, stride, dilation)
    depth = kernel[0] * kernel[1] * c
    row_bytes = out_hw[1] * depth * x.dtype.itemsize
    image_bytes = row_bytes * out_hw[0]
    budget = max(COLUMN_BLOCK_BYTES, MIN_BLOCK_ROWS * depth * x.dtype.itemsize)
    if image_bytes <= budget:
        step = max(1, budget // image_bytes)
        for i in range(0, n, step):
            yield _block_copy(view[i:i + step]).reshape(-1, depth), (slice(i, i + step), slice(None))
    else:
        step = max(1, budget // row_bytes)
        for i in range(n):
            for r in range(0, out_hw[0], step):
                yield _block_copy(view[i, r:r + step]).reshape(-1, depth), (slice(i, i + 1), slice(r, r + step))


def _offsets(kernel, stride, dilation, out_hw):
    """`(i, j, rows, cols)`: the slice of padded input that kernel offset (i, j) reads for every output."""
    for i in range(kernel[0]):
        r0 = i * dilation[0]
        rows = slice(r0, r0 + stride[0] * (out_hw[0] - 1) + 1, stride[0])
        for j in range(kernel[1]):
            c0 = j * dilation[1]
            yield i, j, rows, slice(c0, c0 + stride[1] * (out_hw[1] - 1) + 1, stride[1])


def _col2im(dcols, in_shape, kernel, stride, padding, dilation, out_hw):
    """Adjoint of im2col: add each window's column back onto the pixels it was read from."""
    n, h, w, c = in_shape
    (top, bottom), (left, right) = padding
    dcols = dcols.reshape(n, out_hw[0], out_hw[1], kernel[0], kernel[1], c)
    if kernel == (1, 1) and stride == (1, 1) and not (top or bottom or left or right):
        return dcols.reshape(in_shape)
    dxp = np.zeros((n, h + top + bottom, w + left + right, c), dtype=dcols.dtype)
    for i, j, rows, cols in _offsets(kernel, stride, dilation, out_hw):
        dxp[:, rows, cols] += dcols[:, :, :, i, j]
    return _crop(dxp, padding, h, w)


# --- grouped products ------------------------------------------------------------------------
def _columns_by_group(cols, kernel, groups):
    """`(m, kh*kw*c)` columns as `(groups, m, kh*kw*c/groups)`."""
    m = cols.shape[0]
    taps = kernel[0] * kernel[1]
    per = cols.shape[1] // (taps * groups)
    return cols.reshape(m, taps, groups, per).transpose(2, 0, 1, 3).reshape(groups, m, taps * per)


def _filter_by_group(w, groups):
    """`(kh, kw, cg, o)` filter as `(groups, kh*kw*cg, o/groups)`."""
    kh, kw, cg, o = w.shape
    return w.reshape(kh * kw * cg, groups, o // groups).transpose(1, 0, 2)


def _apply_filter(cols, w, groups):
    """Columns times filter: `(m, o)`."""
    if groups == 1:
        return cols @ w.reshape(-1, w.shape[3])
    y = _columns_by_group(cols, w.shape[:2], groups) @ _filter_by_group(w, groups)
    return y.transpose(1, 0, 2).reshape(cols.shape[0], w.shape[3])


def _apply_filter_transposed(g2, w, groups):
    """Output cotangent `(m, o)` times the filter transposed: columns `(m, kh*kw*c)`."""
    kh, kw, cg, o = w.shape
    if groups == 1:
        return g2 @ w.reshape(-1, o).T
    m = g2.shape[0]
    per_group = g2.reshape(m, groups, o // groups).transpose(1, 0, 2)
    dcols = per_group @ _filter_by_group(w, groups).transpose(0, 2, 1)  # (groups, m, kh*kw*cg)
    return dcols.reshape(groups, m, kh * kw, cg).transpose(1, 2, 0, 3).reshape(m, kh * kw * cg * groups)


def _filter_from_columns(cols, g2, w_shape, groups, scratch=False):
    """Columns transposed times output cotangent: the filter's cotangent `(kh, kw, cg, o)` (in the thread's
    scratch buffer if `scratch`)."""
    if groups == 1:
        # Written into an array of the filter's shape, so the gradient handed out is not a
        # reshaped view (which would be copied once more on the way out).
        dtype = np.result_type(cols, g2)
        dw = _scratch_array("filter", w_shape, dtype) if scratch else np.empty(w_shape, dtype=dtype)
        np.matmul(cols.T, g2, out=dw.reshape(-1, w_shape[3]))
        return dw
    m, o = g2.shape
    per_group = g2.reshape(m, groups, o // groups).transpose(1, 0, 2)
    dw = _columns_by_group(cols, w_shape[:2], groups).transpose(0, 2, 1) @ per_group  # (groups, K, o/groups)
    return dw.transpose(1, 0, 2).reshape(w_shape)


# --- the same three operations for arrays of other libraries (CuPy, Dask, pb.jit's traces) ------
# im2col reads windows through NumPy's strides, which other array types do not share; these
# build the columns by slicing and concatenating (one matrix product, as im2col gives), or,
# for grouped convolutions, add up one product per kernel offset with einsum.
def _other_library(*arrays):
    return any(type(a) is not np.ndarray and speaks_nep18(type(a)) for a in arrays)


def _tap(patch, w_ij, groups):
    """`patch (n, oh, ow, c)` times one kernel offset's filter `(cg, o)`: `(n, oh, ow, o)`."""
    if groups == 1:
        return patch @ w_ij
    n, oh, ow, c = patch.shape
    cg, o = w_ij.shape
    by_group = np.einsum("nhwgc,cgo->nhwgo", patch.reshape(n, oh, ow, groups, cg), w_ij.reshape(cg, groups, o // groups))
    return by_group.reshape(n, oh, ow, o)


def _pad_any(x, padding):
    """`_pad` through `np.pad`, which every array type implements."""
    return np.pad(x, ((0, 0), *padding, (0, 0))) if any(any(p) for p in padding) else x


def _sliced_columns(x, kernel, stride, padding, dilation, out_hw):
    """im2col by slicing: `(n, oh, ow, kh * kw * c)`, kernel offsets in row-major order."""
    xp = _pad_any(x, padding)
    taps = [xp[:, rows, cols, :] for _, _, rows, cols in _offsets(kernel, stride, dilation, out_hw)]
    return taps[0] if len(taps) == 1 else np.concatenate(taps, axis=3)


def _conv_any(x, w, stride, padding, dilation, groups):
    out_hw = _output_hw(x.shape, w.shape[:2], stride, padding, dilation)
    if groups == 1:
        return _sliced_columns(x, w.shape[:2], stride, padding, dilation, out_hw) @ w.reshape(-1, w.shape[3])
    xp = _pad_any(x, padding)
    terms = [_tap(xp[:, rows, cols, :], w[i, j], groups) for i, j, rows, cols in _offsets(w.shape[:2], stride, dilation, out_hw)]
    return _total(terms)


def _conv_transpose_any(g, w, in_shape, stride, padding, dilation, groups):
    n, h, wd, c = in_shape
    (top, bottom), (left, right) = padding
    kh, kw, cg, o = w.shape
    dxp = np.zeros_like(g, shape=(n, h + top + bottom, wd + left + right, c))
    if groups == 1:
        dcols = g @ w.reshape(-1, o).T  # (n, oh, ow, kh * kw * c)
        for t, (_, _, rows, cols) in enumerate(_offsets(w.shape[:2], stride, dilation, g.shape[1:3])):
            dxp[:, rows, cols] += dcols[..., t * c:(t + 1) * c]
        return dxp[:, top:top + h, left:left + wd]
    flipped = w.reshape(kh, kw, cg, groups, o // groups).transpose(0, 1, 4, 3, 2).reshape(kh, kw, o // groups, groups * cg)
    for i, j, rows, cols in _offsets(w.shape[:2], stride, dilation, g.shape[1:3]):
        dxp[:, rows, cols] += _tap(g, flipped[i, j], groups)
    return dxp[:, top:top + h, left:left + wd]


def _conv_filter_any(x, g, kernel, stride, padding, dilation, groups):
    n, oh, ow, o = g.shape
    if groups == 1:
        cols = _sliced_columns(x, kernel, stride, padding, dilation, (oh, ow))
        return (cols.reshape(-1, cols.shape[3]).T @ g.reshape(-1, o)).reshape(kernel[0], kernel[1], x.shape[3], o)
    xp = _pad_any(x, padding)
    cg = x.shape[3] // groups
    taps = []
    for i, j, rows, cols in _offsets(kernel, stride, dilation, (oh, ow)):
        patch = xp[:, rows, cols, :].reshape(n, oh, ow, groups, cg)
        per_group = np.einsum("nhwgc,nhwgo->cgo", patch, g.reshape(n, oh, ow, groups, o // groups))
        taps.append(per_group.reshape(cg, o))
    return np.stack(taps).reshape(kernel[0], kernel[1], cg, o)


# --- the three convolution primitives ----------------------------------------------------
@primitive
def _conv(x, w, *, stride, padding, dilation, groups):
    if _other_library(x, w):
        return _conv_any(x, w, stride, padding, dilation, groups)
    out_hw = _output_hw(x.shape, w.shape[:2], stride, padding, dilation)
    y = np.empty((x.shape[0], out_hw[0], out_hw[1], w.shape[3]), dtype=np.result_type(x, w))
    for cols, (images, rows) in _column_blocks(x, w.shape[:2], stride, padding, dilation):
        block = y[images, rows]  # contiguous: whole images, or a band of rows of one image
        if groups == 1:
            np.matmul(cols, w.reshape(-1, w.shape[3]), out=block.reshape(cols.shape[0], -1))
        else:
            block[...] = _apply_filter(cols, w, groups).reshape(block.shape)
    return y


@primitive
def _conv_transpose(g, w, *, in_hw, stride, padding, dilation, groups):
    n, oh, ow, o = g.shape
    in_shape = (n, in_hw[0], in_hw[1], w.shape[2] * groups)
    expected = _output_hw(in_shape, w.shape[:2], stride, padding, dilation)
    if expected != (oh, ow):
        raise ValueError(
            f"A convolution of {in_hw} images with this geometry gives {expected} outputs, "
            f"but the incoming array is {(oh, ow)}; check the output size, stride and padding."
        )
    if _other_library(g, w):
        return _conv_transpose_any(g, w, in_shape, stride, padding, dilation, groups)
    if stride == (1, 1) and n * oh * ow >= 2 * o:
        # A stride-1 transposed convolution is a convolution with the filter flipped and its
        # channel axes swapped: one im2col and one product, faster than col2im's additions
        # unless the images are so small (and channels so many) that flipping the filter,
        # a slow transposing copy, costs more than it saves.
        full = tuple((d * (k - 1) - lo, d * (k - 1) - hi) for k, d, (lo, hi) in zip(w.shape[:2], dilation, padding))
        if min(min(p) for p in full) >= 0:
            return _conv(g, _flipped_filter(w, groups), stride=stride, padding=full, dilation=dilation, groups=groups)
    dcols = _apply_filter_transposed(g.reshape(-1, o), w, groups)
    return _col2im(dcols, in_shape, w.shape[:2], stride, padding, dilation, (oh, ow))


def _flipped_filter(w, groups):
    """The filter of the transposed convolution: kernel reversed, each group's in and out channels swapped."""
    kh, kw, cg, o = w.shape
    per_group = w[::-1, ::-1].reshape(kh, kw, cg, groups, o // groups)
    return np.ascontiguousarray(per_group.transpose(0, 1, 4, 3, 2)).reshape(kh, kw, o // groups, groups * cg)


@primitive
def _conv_filter(x, g, *, kernel, stride, padding, dilation, groups):
    if _other_library(x, g):
        return _conv_filter_any(x, g, kernel, stride, padding, dilation, groups)
    w_shape = (kernel[0], kernel[1], x.shape[3] // groups, g.shape[3])
    dw = None
    for cols, (images, rows) in _column_blocks(x, kernel, stride, padding, dilation):
        part = _filter_from_columns(cols, g[images, rows].reshape(-1, g.shape[3]), w_shape, groups, dw is not None)
        dw = part if dw is None else np.add(dw, part, out=dw)
    return dw


@rrule(_conv)
def _conv_rule(x, w, **geometry):
    y = _conv(x, w, **geometry)
    in_hw, kernel = x.shape[1:3], w.shape[:2]

    def back(g):
        # The filter's gradient runs im2col again rather than keeping the columns from the
        # forward pass: it costs a few percent of the time and saves their memory (for
        # ResNet-18 at batch 8, ~470 MB held until the backward pass).
        return (
            Thunk(lambda: _conv_transpose(g, w, in_hw=in_hw, **geometry)),
            Thunk(lambda: _conv_filter(x, g, kernel=kernel, **geometry)),
        )

    return y, back


@rrule(_conv_transpose)
def _conv_transpose_rule(g, w, *, in_hw, **geometry):
    y = _conv_transpose(g, w, in_hw=in_hw, **geometry)
    kernel = w.shape[:2]

    def back(dy):
        return (
            Thunk(lambda: _conv(dy, w, **geometry)),
            Thunk(lambda: _conv_filter(dy, g, kernel=kernel, **geometry)),
        )

    return y, back


@rrule(_conv_filter)
def _conv_filter_rule(x, g, *, kernel, **geometry):
    y = _conv_filter(x, g, kernel=kernel, **geometry)
    in_hw = x.shape[1:3]

    def back(dw):
        return (
            Thunk(lambda: _conv_transpose(g, dw, in_hw=in_hw, **geometry)),
            Thunk(lambda: _conv(x, dw, **geometry)),
        )

    return y, back


# --- forward mode: the operations are linear in each argument ---------------------------------
def _total(parts):
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return total


def _bilinear_frule(op, **fixed):
    """Forward rule of `op(a, b)`, linear in each argument: `op(da, b) + op(a, db)`."""

    def forward(primals, tangents, **geometry):
        (a, b), (da, db) = primals, tangents
        return op(a, b, **geometry), _total([
            None if da is None else op(da, b, **geometry),
            None if db is None else op(a, db, **geometry),
        ])

    return forward


for _op in (_conv, _conv_transpose, _conv_filter):
    frule(_op)(_bilinear_frule(_op))


def conv_geometry(kernel, stride, padding, dilation, groups):
    as_pair(kernel, "kernel_size", minimum=1)
    check_groups(groups)
    dilation = as_pair(dilation, "dilation", minimum=1)
    return {
        "stride": as_pair(stride, "stride", minimum=1),
        "padding": normalise_padding(padding, kernel, dilation),
        "dilation": dilation,
        "groups": int(groups),
    }


def _check_filter(x, w, groups, name):
    _check_image(x, name)
    check_groups(groups)
    if np.ndim(w) != 4:
        raise ValueError(f"{name} expects a filter shaped (kernel_h, kernel_w, in_channels // groups, out_channels); got {np.shape(w)}")
    c, (_, _, cg, o) = np.shape(x)[3], np.shape(w)
    if cg * groups != c or o % groups:
        raise ValueError(
            f"{name}: images with {c} channels and groups={groups} need a filter with {c // max(groups, 1)} input "
            f"channels and out_channels divisible by {groups}; got filter shape {np.shape(w)}"
        )


def conv2d(
    x: Any, w: Any, *, stride: int | tuple[int, int] = 1, padding: Padding = 0, dilation: int | tuple[int, int] = 1,
    groups: int = 1,
) -> Any:
    """2-d convolution (cross-correlation, as in PyTorch) of NHWC images `x` with an HWIO filter `w`.

    >>> import numpy as np
    >>> x = np.arange(16.0).reshape(1, 4, 4, 1)
    >>> conv2d(x, np.ones((2, 2, 1, 1)), stride=2)[0, :, :, 0]
    array([[10., 18.],
           [42., 50.]])
    """
    _check_filter(x, w, groups, "conv2d")
    return _conv(x, w, **conv_geometry(np.shape(w)[:2], stride, padding, dilation, groups))


def conv_transpose2d(
    x: Any, w: Any, *, stride: int | tuple[int, int] = 1, padding: Padding = 0, output_padding: int | tuple[int, int] = 0,
    dilation: int | tuple[int, int] = 1, groups: int = 1,
) -> Any:
    """Transposed convolution: the adjoint of `conv2d` in its input, as PyTorch's `conv_transpose2d`.

    `w` is `(kernel_h, kernel_w, out_channels // groups, in_channels)`: the filter of the
    convolution this one transposes. `output_padding` adds rows/columns at the bottom/right.

    >>> import numpy as np
    >>> conv_transpose2d(np.ones((1, 2, 2, 1)), np.ones((2, 2, 1, 1)), stride=2).shape
    (1, 4, 4, 1)
    """
    _check_image(x, "conv_transpose2d")
    check_groups(groups)
    if np.ndim(w) != 4 or np.shape(w)[3] != np.shape(x)[3] or np.shape(x)[3] % groups:
        raise ValueError(
            "conv_transpose2d expects a filter shaped (kernel_h, kernel_w, out_channels // groups, in_channels) "
            f"with in_channels = {np.shape(x)[3]} (divisible by groups={groups}); got {np.shape(w)}"
        )
    kernel = np.shape(w)[:2]
    geometry = conv_geometry(kernel, stride, padding, dilation, groups)
    extra = as_pair(output_padding, "output_padding", minimum=0)
    s, p, d = geometry["stride"], geometry["padding"], geometry["dilation"]
    if any(e >= max(sa, da) for e, sa, da in zip(extra, s, d)):
        raise ValueError(f"output_padding {extra} must be smaller than the stride or the dilation")
    in_hw = tuple(
        (np.shape(x)[1 + a] - 1) * s[a] - p[a][0] - p[a][1] + d[a] * (kernel[a] - 1) + 1 + extra[a] for a in range(2)
    )
    if all(e < sa for e, sa in zip(extra, s)):
        return _conv_transpose(x, w, in_hw=in_hw, **geometry)
    # output_padding ≥ stride (a dilation larger than the stride allows it): the convolution of in_hw would
    # give more outputs than x has. Every row x reaches is below in_hw - output_padding + pad_hi: transpose
    # onto those (no padding at the end), then cut or pad with zeros to in_hw.
    reach = tuple(in_hw[a] - extra[a] + p[a][1] for a in range(2))
    full = _conv_transpose(x, w, in_hw=reach, **{**geometry, "padding": tuple((lo, 0) for lo, _ in p)})
    cut = full[:, :in_hw[0], :in_hw[1]]
    missing = [max(0, h - r) for h, r in zip(in_hw, reach)]
    return np.pad(cut, [(0, 0), (0, missing[0]), (0, missing[1]), (0, 0)]) if any(missing) else cut


# --- pooling ---------------------------------------------------------------------------------
def pool_geometry(x, kernel, stride, padding):
    _check_image(x, "pooling")
    kernel = as_pair(kernel, "kernel", minimum=1)
    stride = kernel if stride is None else as_pair(stride, "stride", minimum=1)
    padding = normalise_padding(padding, kernel)
    for (lo, hi), k in zip(padding, kernel):
        if max(lo, hi) > k // 2:
            raise ValueError(f"pooling padding {padding} should be at most half the kernel {kernel}")
    return {"kernel": kernel, "stride": stride, "padding": padding}


def _pool_out(shape, kernel, stride, padding):
    return _output_hw(shape, kernel, stride, padding, (1, 1))


def _valid_span(size, out, tap, stride, pad):
    """For one kernel offset along one axis: the outputs whose tap lands inside the input
    (not in the padding), as a slice of outputs and the matching strided slice of inputs."""
    first = max(0, -(-(pad - tap) // stride))  # ceil((pad - tap) / stride)
    last = min(out - 1, (size - 1 + pad - tap) // stride)
    if last < first:
        return None
    start = first * stride + tap - pad
    return slice(first, last + 1), slice(start, start + (last - first) * stride + 1, stride)


def _pool_taps(in_hw, out_hw, kernel, stride, padding):
    """`(k, out_block, in_block)` for each kernel offset k (row-major): which outputs read real
    inputs through that offset, and which inputs. Padding is never materialised: a tap that
    falls in the padding is simply left out (-inf for max pooling, zero for mean pooling)."""
    for i in range(kernel[0]):
        rows = _valid_span(in_hw[0], out_hw[0], i, stride[0], padding[0][0])
        for j in range(kernel[1]):
            cols = _valid_span(in_hw[1], out_hw[1], j, stride[1], padding[1][0])
            if rows is not None and cols is not None:
                yield i * kernel[1] + j, (slice(None), rows[0], cols[0]), (slice(None), rows[1], cols[1])


@primitive
def _max_pool(x, *, kernel, stride, padding):
    return _max_and_argmax(x, kernel, stride, padding, with_argmax=False)[0]


def _max_and_argmax(x, kernel, stride, padding, with_argmax=True):
    """Max pooling and, for each output, the first kernel offset (row-major) holding the
    maximum (PyTorch's choice on ties), in one sweep over the offsets."""
    out_hw = _pool_out(x.shape, kernel, stride, padding)
    # *_like: arrays of x's own type (Dask, CuPy)
    y = np.full_like(x, _lowest(x.dtype), shape=(x.shape[0], *out_hw, x.shape[3]))
    kind = np.uint8 if kernel[0] * kernel[1] < 2**8 else np.int32
    arg = np.zeros_like(x, dtype=kind, shape=y.shape) if with_argmax else None
    better = np.empty_like(x, dtype=bool, shape=y.shape) if with_argmax else None
    for k, out_block, in_block in _pool_taps(x.shape[1:3], out_hw, kernel, stride, padding):
        window, y_block = x[in_block], y[out_block]
        if with_argmax:
            b = better[out_block]
            np.greater(window, y_block, out=b)  # strictly: an earlier offset keeps a tie
            # Offsets only grow, so "the last offset that improved" is a running maximum of
            # k * better (much faster than a masked copy).
            a = arg[out_block]
            np.maximum(a, np.multiply(b, kind(k), dtype=kind), out=a)
        np.maximum(y_block, window, out=y_block)
    return y, arg


def _lowest(dtype):
    """The value no element of `dtype` is below: -inf, or an integer type's minimum (-inf cast to
    int8 or int16 is 0, which would beat every negative element)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return False
    return np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf


def _argmax_offsets(x, kernel, stride, padding):
    return _max_pool_and_offsets(stop_gradient(x), kernel=kernel, stride=stride, padding=padding)[1]


@primitive
def _max_pool_and_offsets(x, *, kernel, stride, padding):
    """`_max_and_argmax` as one call under pb.jit, which would otherwise record each offset's writes into
    views of its arrays as copies of them."""
    return _max_and_argmax(x, kernel, stride, padding)


@primitive
def _pool_scatter(g, arg, *, in_shape, kernel, stride, padding):
    """Send each output's cotangent to the input its `arg` offset names (max pooling's backward)."""
    dx = np.zeros_like(g, shape=in_shape)
    mask, share = np.empty_like(arg, dtype=bool), np.empty_like(g)
    for k, out_block, in_block in _pool_taps(in_shape[1:3], g.shape[1:3], kernel, stride, padding):
        m, sh = mask[out_block], share[out_block]
        np.equal(arg[out_block], k, out=m)
        dx[in_block] += np.multiply(g[out_block], m, out=sh)
    return dx


@primitive
def _pool_gather(z, arg, *, in_shape, kernel, stride, padding):
    """Adjoint of `_pool_scatter`: read, for each output, the input its `arg` offset names."""
    out = np.zeros(arg.shape, dtype=z.dtype)
    for k, out_block, in_block in _pool_taps(in_shape[1:3], arg.shape[1:3], kernel, stride, padding):
        out[out_block] += z[in_block] * (arg[out_block] == k)
    return out


@rrule(_max_pool)
def _max_pool_rule(x, **geometry):
    if type(x) is np.ndarray or is_stand_in(x):  # (under pb.jit: one recorded call)
        y, arg = _max_pool_and_offsets(x, **geometry)
    else:  # differentiated again: the output must be traced; the offsets come from plain values
        y, arg = _max_pool(x, **geometry), None
    in_shape = x.shape

    def back(g):
        offsets = arg if arg is not None else _argmax_offsets(x, **geometry)
        return (Thunk(lambda: _pool_scatter(g, offsets, in_shape=in_shape, **geometry)),)

    return y, back


@rrule(_pool_scatter)
def _pool_scatter_rule(g, arg, **geometry):
    return _pool_scatter(g, arg, **geometry), lambda dx: (_pool_gather(dx, arg, **geometry), None)


@rrule(_pool_gather)
def _pool_gather_rule(z, arg, **geometry):
    return _pool_gather(z, arg, **geometry), lambda dy: (_pool_scatter(dy, arg, **geometry), None)


@primitive
def _mean_pool(x, *, kernel, stride, padding):
    out_hw = _pool_out(x.shape, kernel, stride, padding)
    y = np.zeros_like(x, shape=(x.shape[0], *out_hw, x.shape[3]))  # of x's own type (Dask, CuPy)
    for _, out_block, in_block in _pool_taps(x.shape[1:3], out_hw, kernel, stride, padding):
        y[out_block] += x[in_block]
    scale = 1.0 / (kernel[0] * kernel[1])
    return np.multiply(y, scale, out=y) if type(y) is np.ndarray else y * scale  # (Dask takes no out=)


@primitive
def _mean_pool_adjoint(g, *, in_shape, kernel, stride, padding):
    dx = np.zeros_like(g, shape=in_shape)
    share = g * (1.0 / (kernel[0] * kernel[1]))
    for _, out_block, in_block in _pool_taps(in_shape[1:3], g.shape[1:3], kernel, stride, padding):
        dx[in_block] += share[out_block]
    return dx


@rrule(_mean_pool)
def _mean_pool_rule(x, **geometry):
    in_shape = x.shape
    return _mean_pool(x, **geometry), lambda g: (Thunk(lambda: _mean_pool_adjoint(g, in_shape=in_shape, **geometry)),)


@rrule(_mean_pool_adjoint)
def _mean_pool_adjoint_rule(g, *, in_shape, **geometry):
    return _mean_pool_adjoint(g, in_shape=in_shape, **geometry), lambda dx: (_mean_pool(dx, **geometry),)


@frule(_max_pool)
def _max_pool_frule(primals, tangents, **geometry):
    (x,), (dx,) = primals, tangents
    y = _max_pool(x, **geometry)
    if dx is None:
        return y, None
    return y, _pool_gather(dx, _argmax_offsets(x, **geometry), in_shape=x.shape, **geometry)


def _linear_frule(op):
    """Forward rule of an operation linear in its first argument (the others are constants)."""

    def forward(primals, tangents, **kwargs):
        y = op(*primals, **kwargs)
        if tangents[0] is None:
            return y, None
        return y, op(tangents[0], *primals[1:], **kwargs)

    return forward


for _op in (_pool_scatter, _pool_gather, _mean_pool, _mean_pool_adjoint):
    frule(_op)(_linear_frule(_op))


def max_pool2d(
    x: Any, kernel: int | tuple[int, int], *, stride: int | tuple[int, int] | None = None, padding: Padding = 0
) -> Any:
    """Max pooling of NHWC images; `stride` defaults to the kernel size; padding counts as -inf.

    >>> import numpy as np
    >>> max_pool2d(np.arange(16.0).reshape(1, 4, 4, 1), 2)[0, :, :, 0]
    array([[ 5.,  7.],
           [13., 15.]])
    """
    return _max_pool(x, **pool_geometry(x, kernel, stride, padding))


def mean_pool2d(
    x: Any, kernel: int | tuple[int, int], *, stride: int | tuple[int, int] | None = None, padding: Padding = 0
) -> Any:
    """Mean pooling of NHWC images; padding counts as zeros in the mean (PyTorch's default).

    >>> import numpy as np
    >>> mean_pool2d(np.arange(16.0).reshape(1, 4, 4, 1), 2)[0, :, :, 0]
    array([[ 2.5,  4.5],
           [10.5, 12.5]])
    """
    if getattr(getattr(x, "dtype", None), "kind", "f") in "biu":  # integer images average to float64, as np.mean
        x = x.astype(np.float64)
    return _mean_pool(x, **pool_geometry(x, kernel, stride, padding))
