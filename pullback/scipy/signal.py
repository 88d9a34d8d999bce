"""`scipy.signal`, differentiable: `convolve`, `correlate`, `fftconvolve` and `lfilter`, with
SciPy's signatures. SciPy is imported on first use.

>>> import numpy as np, pullback as pb
>>> from pullback.scipy import signal
>>> pb.gradient(lambda x: np.sum(signal.lfilter([0.5, 0.5], [1.0], x)), np.ones(3))[0]
array([1. , 1. , 0.5])
"""

from ..rules.scipy_signal import convolve, correlate, fftconvolve, lfilter

__all__ = ["convolve", "correlate", "fftconvolve", "lfilter"]
