"""An idiom's replacement, declared over its spellings' example tensors, and the ``verify``
builder derived from the declaration (:func:`builder`): what ``hint.verify()`` times.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from neuronscope.analysis.opgraph import short_name
from neuronscope.analysis.patterns.shapes import VECTOR_SHAPES, fits_vector
from neuronscope.analysis.patterns.spelling import READ_PARAMETERS, Spelling, examples, spelling_runs
from neuronscope.capture.idioms import Builders
from neuronscope.errors import NeuronscopeError

__all__ = ["Replacement", "builder"]


#: An idiom's replacement: ``(t, **choice) -> (name, thunk)`` over the same example tensors
#: and choice as the spelling it replaces; None where torch has no eager one.
Replacement = Callable[..., tuple[str, Callable[[], Any]] | None]


def builder(spellings: tuple[Spelling, ...], replacement: Replacement) -> Callable[[Any, Any, Any], Builders]:
    """The verify builder of an idiom, from its declaration: the spelling choice whose op order
    is closest to the hint's ops (the spelling family captured: ``pow`` / ``rsqrt`` or
    ``sqrt`` / ``div``, the weight and bias the code applies...), run on the hint's input ``x``
    with the parameters the hint recorded, against the declared replacement."""
    import difflib

    def build(hint: Any, x: Any, device: Any) -> Builders:
        import torch

        ops = list(map(short_name, hint.ops))
        nearest = max(
            spelling_runs(spellings), key=lambda run: difflib.SequenceMatcher(None, [op.op for op in run.ops], ops, autojunk=False).ratio()
        )
        choice, spelling = nearest.choice, nearest.spelling
        details = hint.details
        # A choice the hint recorded (a softmax's dim, a cross-entropy's loss) is the code's.
        choice = {k: (details[k] if k in details and details[k] in spelling.choices[k] else v) for k, v in choice.items()}
        # The parameters the hint read from the user's numbers (an eps, a correction), and its dim.
        params = {k: details[k] for k in READ_PARAMETERS if isinstance(details.get(k), (int, float)) and not isinstance(details[k], bool)}
        dim = details.get("dim")
        if isinstance(dim, int) and not isinstance(dim, bool) and -x.dim() <= dim < x.dim():
            params["dim"] = dim
        t = examples(x.dtype, x, device, **params)
        shapes = details.get(VECTOR_SHAPES)
        for name, shape in (shapes.items() if isinstance(shapes, dict) else ()):
            # A weight of another shape than (d,) (a per-head one), in that shape: the replacement
            # applies it after the fused call, as the hint says. One that is no weight of x (an
            # edited result.json) would fail in the timing, or fill memory: said instead. A name
            # that is none of the example weights (x itself, a number, ``__class__``) is no
            # tensor the spelling reads in another shape: left alone, as an unknown name.
            if not isinstance(name, str) or name == "x" or not isinstance(vars(t).get(name), torch.Tensor):
                continue
            if not (isinstance(shape, list) and all(type(n) is int for n in shape) and fits_vector(tuple(shape), tuple(x.shape), t.dim)):
                raise NeuronscopeError(f"this hint's {VECTOR_SHAPES}[{name!r}], {shape!r}, is no weight of its input {list(x.shape)}")
            setattr(t, name, torch.randn(*shape, generator=torch.Generator().manual_seed(0)).to(device=device, dtype=x.dtype))
        fused = replacement(t, **choice)
        return (lambda: spelling.fn(t, **choice)), (fused[1] if fused else None), (fused[0] if fused else None)

    return build
