"""Second derivatives through the kink of np.abs, np.fabs, the 2-norm and np.hypot are refused where the
forward-mode outer level moves an element through the kink, instead of taking the subgradient's derivative (0).

The subgradient (0 at the kink) is right for a first derivative: central differences straddle the kink. Its own
derivative is not the one a smooth function built on it has: np.abs(a) ** 2 has second derivative 2 at 0.
"""

import numpy as np
import pytest

import pullback as pb

ZERO = np.zeros(2)
OFF = np.array([0.5, -1.25])

SMOOTH_AT_THE_KINK = {  # f, and its Hessian everywhere (the function is a smooth quadratic)
    "abs": (lambda a: np.sum(np.abs(a) ** 2), 2 * np.eye(2)),
    "fabs": (lambda a: np.sum(np.fabs(a) ** 2), 2 * np.eye(2)),
    "complex abs": (lambda a: np.sum(np.abs(a * (1 + 1j)) ** 2), 4 * np.eye(2)),
    "norm": (lambda a: np.linalg.norm(a) ** 2, 2 * np.eye(2)),
    "norm of rows": (lambda a: np.sum(np.linalg.norm(np.stack([a, 2 * a]), axis=1) ** 2), 10 * np.eye(2)),
    "hypot": (lambda a: np.hypot(a[0], a[1]) ** 2, 2 * np.eye(2)),
}


def _fd_hessian(f, x, h=1e-4):
    """Central differences of central differences (exact for a quadratic, to rounding)."""
    n = x.size
    out = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            e_i, e_j = np.eye(n)[i] * h, np.eye(n)[j] * h
            out[i, j] = (f(x + e_i + e_j) - f(x + e_i - e_j) - f(x - e_i + e_j) + f(x - e_i - e_j)) / (4 * h * h)
    return out


@pytest.mark.parametrize("name", sorted(SMOOTH_AT_THE_KINK))
def test_the_hessian_through_a_kink_is_refused_at_the_kink_and_right_elsewhere(name):
    f, hessian = SMOOTH_AT_THE_KINK[name]
    np.testing.assert_allclose(_fd_hessian(f, ZERO), hessian, atol=1e-6)  # what 0 would silently miss
    with pytest.raises(ValueError, match="second derivative through .* at its kink") as raised:
        pb.hessian(f, ZERO)
    assert "a * a" in str(raised.value)  # the kink-free spelling
    np.testing.assert_allclose(pb.hessian(f, OFF), hessian, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(pb.hessian(f, OFF), _fd_hessian(f, OFF), atol=1e-5)


@pytest.mark.parametrize("name", sorted(SMOOTH_AT_THE_KINK))
def test_forward_over_forward_is_refused_too(name):
    f, _ = SMOOTH_AT_THE_KINK[name]
    directional = lambda x: pb.jvp(f, (x,), (np.ones(2),))[1]  # noqa: E731
    with pytest.raises(ValueError, match="at its kink"):
        pb.jvp(directional, (ZERO,), (np.ones(2),))


@pytest.mark.parametrize("name", sorted(SMOOTH_AT_THE_KINK))
def test_first_derivatives_at_the_kink_are_the_subgradient(name):
    f, _ = SMOOTH_AT_THE_KINK[name]
    (g,) = pb.gradient(f, ZERO)
    np.testing.assert_array_equal(g, np.zeros(2))
    _, t = pb.jvp(f, (ZERO,), (np.ones(2),))
    assert t == 0.0


def test_only_the_elements_moved_through_the_kink_count():
    f = lambda a: np.sum(np.abs(a) ** 2)  # noqa: E731
    x = np.array([0.0, 1.5])
    np.testing.assert_allclose(pb.hvp(f, x, np.array([0.0, 1.0])), [0.0, 2.0])  # moves only the smooth element
    with pytest.raises(ValueError, match="at 1 element"):
        pb.hvp(f, x, np.array([1.0, 0.0]))


def test_a_structural_zero_is_not_refused():
    """Below R's diagonal QR gives exact zeros that no direction moves: |R|² is smooth there."""
    def f(x):
        r = np.linalg.qr(np.reshape(x, (2, 2)) + 2.0 * np.eye(2))[1]
        return np.sum(np.abs(r) ** 2)

    x = np.array([0.3, -0.7, 0.5, 1.1])
    np.testing.assert_allclose(pb.hessian(f, x), _fd_hessian(f, x), atol=1e-5)
