"""Fit a small neural network with SciPy's BFGS through `pb.destructure`.

`destructure` turns any model (here a plain Python class) into one flat parameter vector and
a `rebuild` function; `pb.withgradient` differentiates the loss through `rebuild`, so
`scipy.optimize.minimize(fun, flat, jac=True)` gets the value and the gradient in one call.

    python examples/fit_with_scipy.py
"""

import numpy as np
from scipy.optimize import minimize

import pullback as pb


class MLP:
    """A multilayer perceptron with tanh hidden layers: plain arrays in plain lists."""

    def __init__(self, sizes, rng):
        self.weights = [rng.standard_normal((n_in, n_out)) / np.sqrt(n_in) for n_in, n_out in zip(sizes, sizes[1:])]
        self.biases = [np.zeros(n_out) for n_out in sizes[1:]]

    def __call__(self, x):
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            x = x @ w + b
            if i < len(self.weights) - 1:
                x = np.tanh(x)
        return x


def make_data(rng, n=80):
    x = np.linspace(-2.0, 2.0, n)[:, None]
    y = np.sin(2.0 * x) + 0.3 * x
    return x, y


def fit(seed=0, hidden=16, maxiter=2000):
    """Returns `(fitted_model, scipy_result, initial_loss)`."""
    rng = np.random.default_rng(seed)
    x, y = make_data(rng)
    model = MLP([1, hidden, 1], rng)
    flat, rebuild = pb.destructure(model)

    def loss(vector):
        return np.mean((rebuild(vector)(x) - y) ** 2)

    def value_and_gradient(vector):
        value, (gradient,) = pb.withgradient(loss, vector)
        return float(value), gradient

    initial = float(loss(flat))
    result = minimize(value_and_gradient, flat, jac=True, method="BFGS", options={"maxiter": maxiter})
    return rebuild(result.x), result, initial


def main():
    model, result, initial = fit()
    print(f"{len(result.x)} parameters, loss {initial:.4f} -> {result.fun:.2e} "
          f"in {result.nit} iterations ({result.message})")


if __name__ == "__main__":
    main()
