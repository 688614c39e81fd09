"""The op graph's types: a user-level op (:class:`OpNode`), its tensor inputs, the graph, and
the op-name sets the graph builders and matchers share (views, maybe-alias ops, elementwise ops).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from neuronscope.capture import torch_private

__all__ = [
    "COPY_MARKERS",
    "ELEMENTWISE_OPS",
    "MAYBE_ALIAS_OPS",
    "VIEW_OPS",
    "OpGraph",
    "OpNode",
    "TensorArg",
    "copied",
    "event_types",
    "link_consumers",
    "short_name",
    "takes_tensor_list",
]

# Ops whose output shares its input's storage: consumers of the view link straight to whoever
# wrote the storage, as they would to the base tensor.
VIEW_OPS = frozenset(
    [
        "view", "_reshape_alias", "view_as", "transpose", "t", "T", "mT", "permute", "unsqueeze",
        "squeeze", "expand", "expand_as", "slice", "select", "narrow", "as_strided", "detach",
        "alias", "chunk", "split", "split_with_sizes", "unbind", "unflatten", "movedim", "moveaxis",
        "swapaxes", "swapdims", "diagonal", "unfold", "view_as_real", "view_as_complex", "real",
        "imag", "numpy_T", "adjoint", "lift_fresh",
    ]
)
# Ops that return their input unchanged in some calls and a new tensor in others; they made
# one only when one of COPY_MARKERS ran below them.
MAYBE_ALIAS_OPS = frozenset(
    [
        "to", "type_as", "contiguous", "reshape", "reshape_as", "flatten", "dropout", "feature_dropout",
        "alpha_dropout", "float", "half", "bfloat16", "double", "int", "long", "bool",
    ]
)
COPY_MARKERS = frozenset(
    {"aten::_to_copy", "aten::clone", "aten::copy_", "aten::native_dropout", "aten::bernoulli_", "aten::empty_like"}
)

ELEMENTWISE_OPS = frozenset(
    [
        "add", "sub", "rsub", "mul", "div", "true_divide", "floor_divide", "neg", "exp", "exp2",
        "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "pow", "square", "abs", "sign",
        "sin", "cos", "tan", "tanh", "sinh", "cosh", "asin", "acos", "atan", "atan2", "sigmoid",
        "logit", "erf", "erfc", "erfinv", "relu", "relu6", "gelu", "silu", "mish", "hardswish",
        "hardsigmoid", "hardtanh", "leaky_relu", "elu", "selu", "celu", "softplus", "softsign",
        "threshold", "clamp", "clamp_min", "clamp_max", "clip", "maximum", "minimum", "fmax",
        "fmin", "reciprocal", "where", "masked_fill", "lerp", "addcmul", "addcdiv", "floor", "ceil",
        "round", "trunc", "frac", "remainder", "fmod", "eq", "ne", "lt", "le", "gt", "ge",
        "logical_and", "logical_or", "logical_not", "logical_xor", "bitwise_and", "bitwise_or",
        "bitwise_not", "isnan", "isinf", "nan_to_num", "to", "_to_copy", "type_as", "float", "half",
        "bfloat16", "dropout",
    ]
)

#: aten ops that take a list of tensors (besides the ``_foreach_*`` family): the profiler
#: records such a list's shape as empty, while the observation sees its members.
TENSOR_LIST_OPS = frozenset({
    "cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack", "column_stack", "row_stack",
    "index", "index_put", "index_put_", "_index_put_impl_", "einsum", "meshgrid", "broadcast_tensors",
    "block_diag", "cartesian_prod", "chunk_cat", "_chunk_cat", "_fused_adam_", "_fused_adamw_", "_fused_sgd_",
})


def takes_tensor_list(op: str) -> bool:
    """Does aten op ``op`` (its name without the namespace) take a list of tensors? Only for
    such an op may the observation see more input tensors than the capture recorded: for any
    other, an input the capture lacks is a different call (a scalar where a tensor was), and
    copying the observation's links would claim data flow that did not happen."""
    return op.startswith("_foreach_") or op in TENSOR_LIST_OPS


@functools.lru_cache(maxsize=4096)
def short_name(name: str) -> str:
    """``aten::mul_`` -> ``mul``: the op without namespace or in-place underscore (cached:
    a capture has a few hundred distinct names over up to millions of events)."""
    base = name.rsplit("::", 1)[-1]
    if base.endswith("_") and not base.startswith("_"):
        base = base[:-1]
    return base


class TensorArg(NamedTuple):
    """One tensor input as the profiler saw it. ``key`` is its storage identity (the
    profiler's tensor id, or the storage pointer); ``impl`` the TensorImpl pointer;
    ``strides`` its memory layout where the profiler recorded it (empty where not)."""

    key: int
    sizes: tuple[int, ...]
    dtype: str
    impl: int = 0
    numel: int = 1
    strides: tuple[int, ...] = ()


@dataclass(eq=False, slots=True)
class OpNode:
    """A user-level op and, in a live graph, where its tensor inputs came from.

    ``producers[k]`` is the index of the node that wrote ``inputs[k]`` (-1: made outside the
    capture or by no op, such as a parameter). ``scalars`` holds the non-tensor arguments.
    """

    index: int
    name: str
    op: str
    tid: int
    start_ns: int
    end_ns: int
    inputs: list[TensorArg] = field(default_factory=list)
    producers: list[int] = field(default_factory=list)
    scalars: list[Any] = field(default_factory=list)
    consumers: list[int] = field(default_factory=list)
    cpu_ns: int = 0
    device_ns: int = 0
    location: str | None = None
    event: Any = None  # live graphs: the event-tree node, for code locations
    #: The Python numbers the user passed (``x * 0.125``), where an observation pass saw them.
    consts: tuple[float, ...] = ()
    #: The torch function of the user's line that ran this op inside it with others (a
    #: library composite: ``multi_head_attention_forward``), where an observation saw it.
    within: str | None = None
    #: False for ops that made no tensor: views, and ``.to()`` / ``.contiguous()`` calls that
    #: returned their input. They read data but never sit inside a fusable chain.
    writes: bool = True

    @property
    def inplace(self) -> bool:
        base = self.name.rsplit("::", 1)[-1]
        return base.endswith("_") and not base.startswith("_")

    @property
    def elementwise(self) -> bool:
        return self.op in ELEMENTWISE_OPS

    def value(self, k: int) -> tuple[int, int]:
        """Identity of input ``k``: its storage and who wrote it (addresses are reused)."""
        return (self.inputs[k].key, self.producers[k])

    def big_inputs(self) -> list[int]:
        """Positions of inputs that are not 0-dim (a Python scalar arrives as a 0-dim tensor)."""
        return [k for k, t in enumerate(self.inputs) if t.sizes]


@dataclass
class OpGraph:
    """User-level ops in time order. ``linking``: ``"exact"`` or ``"none"`` (op order only)."""

    nodes: list[OpNode]
    linking: str
    has_device: bool = False

    def producer(self, node: OpNode, k: int) -> OpNode | None:
        p = node.producers[k] if k < len(node.producers) else -1
        return self.nodes[p] if p >= 0 else None

    def time_ns(self, node: OpNode) -> int:
        """The time that ranks an op: device time where the capture has it, else CPU time."""
        return node.device_ns if self.has_device else node.cpu_ns


def link_consumers(nodes: list[OpNode]) -> None:
    """Each op's consumers, from the producers of the ops that read it."""
    for n in nodes:
        for p in n.producers:
            if p >= 0:
                nodes[p].consumers.append(n.index)


def event_types() -> tuple[Any, Any, Any, Any, Any]:
    RecordScope, _EventType = torch_private.record_scope_and_event_type()
    return _EventType.TorchOp, _EventType.PyCall, _EventType.PyCCall, _EventType.Allocation, RecordScope.USER_SCOPE


def copied(event: Any, torch_op: Any) -> bool:
    """Did a maybe-alias op (``to``, ``reshape``, ``contiguous``) copy? Only if a copying op
    ran below it; otherwise it returned its input or a view of it."""
    stack = list(event.children)
    while stack:
        child = stack.pop()
        if child.tag == torch_op:
            if child.name in COPY_MARKERS:
                return True
            stack.extend(child.children)
    return False


