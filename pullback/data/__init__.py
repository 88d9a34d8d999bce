"""Small data sets shipped with pullback, for demos and tests (no download, no pickle).

`digits.npz` holds the 8x8 handwritten digits: 1797 images of the digits 0-9, each pixel
an integer count 0..16 (the number of "on" pixels in a 4x4 block of a 32x32 bitmap).
Source: the test set of the UCI Machine Learning Repository's "Optical Recognition of
Handwritten Digits" data set (E. Alpaydin, C. Kaynak, 1998; CC BY 4.0,
https://archive.ics.uci.edu/dataset/80), as distributed with scikit-learn
(`sklearn.datasets.load_digits`). Stored as uint8 arrays `images (1797, 8, 8)` and
`labels (1797,)` in a compressed `.npz`.
"""

from importlib import resources

import numpy as np

__all__ = ["load_digits"]


def load_digits():
    """The handwritten digits: `(images, labels)`, uint8 arrays of shapes (1797, 8, 8) and (1797,).

    >>> images, labels = load_digits()
    >>> images.shape, int(images.max()), labels[:5]
    ((1797, 8, 8), 16, array([0, 1, 2, 3, 4], dtype=uint8))
    """
    with resources.files(__name__).joinpath("digits.npz").open("rb") as f:
        with np.load(f, allow_pickle=False) as data:
            return data["images"], data["labels"]
