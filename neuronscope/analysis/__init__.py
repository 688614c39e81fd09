"""The analysis stage: hints, as pure functions over what a capture measured.

:mod:`.rules` runs them (:class:`~neuronscope.analysis.rules.AnalysisContext`,
:func:`~neuronscope.analysis.rules.analyze`); one module per rule (:mod:`.fusion` with one
module per idiom in :mod:`.patterns`, :mod:`.compile`, :mod:`.launch`, :mod:`.optimizer`,
:mod:`.straggler`). This package module imports none of them, so that reaching one does not
load the rest. ``hint.verify()`` is the capture stage's (:mod:`neuronscope.capture.verify`), so
a result reaches it without importing this stage; it times the idioms as :mod:`.patterns`
declares them, whose builders register with :mod:`neuronscope.capture.idioms` when the patterns
are imported (``import neuronscope`` does).
"""
