"""Where the engine's names used to live; kept while the modules that import them move over."""

from ._errors import check_operand, conversion_error, foreign_error, lost_gradient, missing_rule, subclass_error, ufunc_name  # noqa: F401
from ._forward import ForwardLevel as ForwardTag  # noqa: F401
from ._forward import push_forward  # noqa: F401
from ._inplace import holds_array, in_place, mark_view, rebind  # noqa: F401
from ._reverse import Tape, collector_paused  # noqa: F401
from ._standins import astype as _astype  # noqa: F401
from ._standins import dtype_of as _dtype_of  # noqa: F401
from ._standins import getitem as _getitem  # noqa: F401
from ._standins import index_update as _index_update  # noqa: F401
from ._values import Dual, Traced, Tracked, apply, apply1, apply2, apply_rule, stop_gradient, strip_all  # noqa: F401
