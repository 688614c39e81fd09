"""The analysis stage: hints, as pure functions over what a capture measured.

:mod:`.rules` runs them (:class:`~neuronscope.analysis.rules.AnalysisContext`,
:func:`~neuronscope.analysis.rules.analyze`); one module per rule (:mod:`.fusion` with one
module per idiom in :mod:`.patterns`, :mod:`.compile`, :mod:`.launch`, :mod:`.optimizer`,
:mod:`.straggler`). This package module imports none of them, so that reaching one does not
load the rest. ``hint.verify()`` is the capture stage's (:mod:`neuronscope.capture.verify`,
timing the PyTorch idioms of :mod:`neuronscope.capture.idioms`), so a result reaches it without
importing this stage.
"""
