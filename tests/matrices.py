"""Random matrices on which linear-algebra derivatives exist, for the tests."""

import numpy as np


def well_conditioned(rng, shape):
    """A random square matrix (or stack of them) comfortably far from singular: 2I plus a random part
    of spectral norm at most 1, so every singular value lies in [1, 3]."""
    n = shape[-1]
    noise = rng.normal(size=shape) / np.sqrt(n)
    size = np.linalg.norm(noise, 2, axis=(-2, -1)) if n else np.zeros(shape[:-2])
    return noise / np.maximum(size, 1.0)[..., None, None] + 2.0 * np.eye(n)


def spd(rng, shape):
    """A random symmetric positive definite matrix (or stack) with well separated eigenvalues."""
    n = shape[-1]
    q = np.linalg.qr(rng.normal(size=shape))[0]
    eigenvalues = 1.0 + np.arange(n) + rng.uniform(0.0, 0.5, shape[:-2] + (n,))
    return (q * eigenvalues[..., None, :]) @ np.swapaxes(q, -1, -2)
