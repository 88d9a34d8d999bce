"""A hypothesis strategy for nested models of arrays, with ties, shared by the optim tests."""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

DTYPES = [np.float16, np.float32, np.float64, np.int32, np.bool_]


@st.composite
def models(draw):
    """Nested dicts, lists and tuples whose leaves are arrays; an array may appear at several places."""
    arrays = draw(st.lists(
        hnp.arrays(dtype=st.sampled_from(DTYPES), shape=hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=3)),
        min_size=1, max_size=5,
    ))

    def build(depth):
        kind = draw(st.integers(0, 3 if depth < 3 else 0))
        if kind == 0:
            return arrays[draw(st.integers(0, len(arrays) - 1))]
        kids = [build(depth + 1) for _ in range(draw(st.integers(0, 3)))]
        if kind == 1:
            return kids
        if kind == 2:
            return tuple(kids)
        return {f"k{i}": kid for i, kid in enumerate(kids)}

    return build(0)
