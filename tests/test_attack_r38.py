"""Round 38's attack: what a hostile or unlucky user does to this round's change."""

from __future__ import annotations

import threading

import torch

from neuronscope.capture import torch_private


def test_a_users_compile_in_another_thread_during_verify_stays_registered() -> None:
    """A user's ``torch.compile`` in another thread while verify() or the machine probe
    compiles its own keeps its entry in Dynamo's ``cached_backends`` (what
    ``torch._dynamo.reset()`` resets and what the observation pass reads as the user's use of
    torch.compile): only the entry our own compile call made leaves."""
    registry = torch_private.dynamo_eval_frame(import_it=True).cached_backends

    def user_backend(gm, example_inputs):  # type: ignore[no-untyped-def]
        return gm.forward

    user_done = threading.Event()

    def user_thread() -> None:
        torch.compile(lambda t: t * 2, backend=user_backend)
        user_done.set()

    # verify() compiles, then times its chain for seconds; a user's thread compiles meanwhile
    ours = torch_private.own_compile(lambda t: t + 1, backend="eager", dynamic=False)
    worker = threading.Thread(target=user_thread)
    worker.start()
    worker.join(30)
    assert user_done.is_set()
    ours(torch.ones(2))
    users = [k for k, b in registry.items() if b is user_backend or getattr(b, "compiler_fn", None) is user_backend]
    try:
        assert users, "the user's torch.compile backend was taken out of Dynamo's registry"
    finally:
        for k in users:
            registry.pop(k, None)
