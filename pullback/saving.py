"""`pb.save` and `pb.load`: one entry point for both file formats, chosen by the file name.

A path ending in ``.safetensors`` uses the safetensors format (`pullback.safetensors_io`: a
model's arrays, readable by PyTorch and `safetensors.numpy`, and PyTorch's own files read
in); any other path uses pullback's checkpoint format (`pullback.checkpoint`: a model and
its optimiser state, checksummed).
"""

import os
from typing import Any

from . import checkpoint, safetensors_io

__all__ = ["save", "load"]


def save(path: str | os.PathLike[str], model: Any, state: Any = None) -> None:
    """Write `model`'s arrays (and `state`, an optimiser state for `model`) to `path`, atomically.

    Everything is checked before the file is touched; an existing file at `path` is only
    replaced once the new one is complete on disk. Random generators in `model` (a Dropout's, a
    ``random.Random``, a ``SeedSequence``) are saved with their state. A path ending in
    ``.safetensors`` writes `pb.state_dict(model)` as a safetensors file (no optimiser state; the
    generators' states in its metadata).

    >>> import os, tempfile, numpy as np, pullback as pb
    >>> model = {"w": np.arange(3.0), "mask": np.array([True, False])}
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     pb.save(os.path.join(folder, "model.ckpt"), model)
    ...     pb.load(os.path.join(folder, "model.ckpt"), like={"w": np.zeros(3), "mask": np.ones(2, bool)})
    {'w': array([0., 1., 2.]), 'mask': array([ True, False])}
    """
    if _is_safetensors(path):
        return safetensors_io.save(path, model, state)
    return checkpoint.save(path, model, state)


def load(path: str | os.PathLike[str], like: Any) -> Any:
    """Read the file at `path` into a copy of `like`; with an optimiser state, `(model, state)`.

    Every array's shape and dtype (and every optimiser state) is checked against `like`
    before anything larger than `like` is read; a damaged or hostile file is refused with a
    `CheckpointError` naming the entry. A path ending in ``.safetensors`` is read as a
    safetensors file, in pullback's layout or PyTorch's.

    >>> import os, tempfile, numpy as np, pullback as pb
    >>> model = [np.array([1.0, 2.0])]
    >>> state = pb.optim.setup(pb.optim.Adam(), model)
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     pb.save(os.path.join(folder, "run.ckpt"), model, state)
    ...     model2, state2 = pb.load(os.path.join(folder, "run.ckpt"), like=[np.zeros(2)])
    >>> model2, state2[0].rule
    ([array([1., 2.])], Adam(lr=0.001, beta1=0.9, beta2=0.999, eps=1e-08))
    """
    if _is_safetensors(path):
        return safetensors_io.load(path, like)
    return checkpoint.load(path, like)


def _is_safetensors(path):
    return os.fsdecode(path).lower().endswith(".safetensors")
