"""The compare stage: variants of one computation timed the same way, side by side.

Takes callables and their arguments; gives a :class:`~neuronscope.result.types.Comparison`.
``timing`` (in :mod:`neuronscope.capture.timing`) times them unprofiled in interleaved rounds,
:mod:`.intervals` turns the rounds into speedups with intervals and verdicts, :mod:`.outputs`
checks that the variants agree, :mod:`.options` reads compare()'s options, and :mod:`.variants`
is ``compare()`` itself.
"""
