"""The old names of `pullback.testing`'s checks, for the test files that still import them."""

from pullback import testing


def assert_gradient(f, *args, rtol=1e-5, atol=1e-7, eps=1e-6):
    """Reverse mode against central differences at every element; returns `pb.gradient`'s value."""
    return testing.assert_gradient(f, *args, modes="rev", rtol=rtol, atol=atol, eps=eps, dense_up_to=None).gradient


def numerical_gradient(f, args, k, eps=1e-6):
    """d f(*args) / d args[k] by float64 central differences."""
    return testing.numerical_gradient(f, *args, eps=eps)[k]
