"""NumPy's public callables that carry no derivative, and those not yet covered (see `inventory`)."""

_SHAPE = "An array built from a shape (and a dtype): no differentiable input."
_INTEGERS = "Integer or boolean results (bits, counts, indices): piecewise constant, no gradient."
_CONFIG = "Configuration, help or build information: no array result."
_IO = "Input/output: reads or writes files or buffers."
_TEXT = "Formats numbers or arrays as text."
_DTYPES = "A question about dtypes or types, not about values."
_DATES = "Business-day and datetime arithmetic on integer dates."
_ITERATION = "An iterator or index helper over positions: integers, no gradient."
_CONVERT = ("Converts to a plain ndarray, which cannot carry a gradient. NumPy does not hand these calls "
            "over, so a traced value raises pullback's conversion error naming the fix (np.stack, "
            "np.concatenate, x.copy(), or pullback.stop_gradient).")
_WINDOW = "A window of length M (an integer): no differentiable input."
_NO_DISPATCH = ("Not an array function, so the call never reaches pullback: NumPy converts a traced {what} to a "
                "plain array, which raises pullback's conversion error; instead, {fix}.")
_FREQUENCIES = ("Integer frequency bins divided by n * d: no array input. A traced spacing d goes through NumPy's "
                "own arithmetic with Python operators, which pullback follows, so its derivative is exact without "
                "a rule of its own.")
_MATRIX = ("Makes an np.matrix, a subclass pullback does not track (a traced value raises the subclass error); "
           "use np.block or np.asarray(...) @ ... on plain ndarrays.")

# qualified name -> why no derivative flows through it
NONDIFFERENTIABLE = {
    # arrays built from shapes
    **{f"numpy.{n}": _SHAPE for n in ("zeros", "ones", "empty", "eye", "identity", "tri", "indices", "ndarray",
                                      "mask_indices", "tril_indices", "triu_indices", "diag_indices")},
    "numpy.full": _NO_DISPATCH.format(what="fill value", fix="write `v * np.ones(shape)`, or np.full_like with a "
                                      "traced prototype"),
    "numpy.arange": _NO_DISPATCH.format(what="start or step", fix="write `start + step * np.arange(n)`"),
    "numpy.kaiser": _NO_DISPATCH.format(what="beta", fix="write the window with np.i0, which is covered"),
    "numpy.fromfunction": ("Calls the function on integer index grids; what the function does to traced values "
                           "is differentiated through its own operations."),
    **{f"numpy.{n}": _WINDOW for n in ("bartlett", "blackman", "hamming", "hanning")},
    # conversions
    **{f"numpy.{n}": _CONVERT for n in ("array", "asarray", "asanyarray", "ascontiguousarray", "asfortranarray",
                                        "asarray_chkfinite", "require", "from_dlpack")},
    **{f"numpy.{n}": _MATRIX for n in ("asmatrix", "bmat", "matrix")},
    "numpy.recarray": "A record array of named fields (structured dtype), which pullback does not track.",
    "numpy.memmap": _IO,
    "numpy.vectorize": ("Runs a Python function element by element on object arrays, converting its inputs with "
                        "np.asarray (a traced value raises the conversion error); write the function with NumPy "
                        "operations on whole arrays instead."),
    "numpy.frompyfunc": ("Makes an object-array ufunc from a Python function; its inputs are converted to object "
                         "arrays (a traced value raises the conversion error)."),
    # integer, boolean and index results
    **{f"numpy.{n}": _INTEGERS for n in (
        "bitwise_and", "bitwise_count", "bitwise_invert", "bitwise_left_shift", "bitwise_not", "bitwise_or",
        "bitwise_right_shift", "bitwise_xor", "invert", "left_shift", "right_shift", "gcd", "lcm", "packbits",
        "unpackbits", "isnat", "ravel_multi_index", "unravel_index", "isfortran", "isscalar", "iterable")},
    **{f"numpy.{n}": ("Counts per bin: piecewise constant in the data, no gradient. (Weighted counts, weights=, and "
                      "edges that follow the data's minimum and maximum do have derivatives, which pullback does not "
                      "give: a traced value raises an error naming the function.)")
       for n in ("histogram", "histogram2d", "histogramdd", "histogram_bin_edges")},
    "numpy.einsum_path": "Plans the order of an einsum's contractions (a list and a text report).",
    # dtypes and types
    **{f"numpy.{n}": _DTYPES for n in ("can_cast", "common_type", "min_scalar_type", "mintypecode", "promote_types",
                                       "isdtype", "issubdtype", "typename", "dtype", "finfo", "iinfo",
                                       "ufunc", "broadcast", "broadcast_shapes")},
    # iteration helpers
    **{f"numpy.{n}": _ITERATION for n in ("flatiter", "ndenumerate", "ndindex", "nditer", "nested_iters")},
    # dates
    **{f"numpy.{n}": _DATES for n in ("busday_count", "busday_offset", "busdaycalendar", "is_busday",
                                      "datetime_as_string", "datetime_data")},
    # text
    **{f"numpy.{n}": _TEXT for n in ("array2string", "array_repr", "array_str", "base_repr", "binary_repr",
                                     "format_float_positional", "format_float_scientific")},
    # input and output
    **{f"numpy.{n}": _IO for n in ("load", "loadtxt", "genfromtxt", "save", "savetxt", "savez", "savez_compressed",
                                   "fromfile", "frombuffer", "fromiter", "fromregex", "fromstring")},
    # configuration
    **{f"numpy.{n}": _CONFIG for n in ("errstate", "get_include", "get_printoptions", "getbufsize", "geterr",
                                       "geterrcall", "info", "printoptions", "set_printoptions", "setbufsize",
                                       "seterr", "seterrcall", "show_config", "show_runtime", "test")},
    "numpy.poly1d": ("A polynomial object wrapping its coefficients as a plain array; the functions polyval, "
                     "polyadd, polymul, polyder, polyint, ... on coefficient arrays are covered."),
    # numpy.fft
    "numpy.fft.fftfreq": _FREQUENCIES,
    "numpy.fft.rfftfreq": _FREQUENCIES,
}

# qualified name -> what is missing
NOT_YET = {}
