"""Random matrices on which linear-algebra derivatives exist, for the tests."""

import numpy as np


def well_conditioned(rng, shape):
    """A random square matrix (or stack of them) comfortably far from singular."""
    n = shape[-1]
    return rng.normal(size=shape) / np.sqrt(n) + 2.0 * np.eye(n)


def spd(rng, shape):
    """A random symmetric positive definite matrix (or stack) with well separated eigenvalues."""
    n = shape[-1]
    q = np.linalg.qr(rng.normal(size=shape))[0]
    eigenvalues = 1.0 + np.arange(n) + rng.uniform(0.0, 0.5, shape[:-2] + (n,))
    return (q * eigenvalues[..., None, :]) @ np.swapaxes(q, -1, -2)
