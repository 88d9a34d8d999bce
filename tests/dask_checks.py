"""What the Dask tests share: `NoCompute`, a context in which any Dask compute fails the test.

Import it after `pytest.importorskip("dask.array")`: it subclasses a Dask class.
"""

import warnings

from dask.callbacks import Callback


class NoCompute(Callback):
    """Inside `with NoCompute():` any Dask compute fails the test; Dask's compute-and-warn fallbacks are errors too."""

    def __enter__(self):
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        warnings.simplefilter("error", FutureWarning)  # dask warns before computing a function it does not implement
        return super().__enter__()

    def __exit__(self, *exc):
        super().__exit__(*exc)
        self._warnings.__exit__(*exc)

    def _start(self, dsk):
        raise AssertionError("a Dask array was computed inside the gradient call")
