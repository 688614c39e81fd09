"""The analysis stage: hints, as pure functions over what a capture measured.

:mod:`.rules` runs them (:class:`~neuronscope.analysis.rules.AnalysisContext`,
:func:`~neuronscope.analysis.rules.analyze`); one module per rule (:mod:`.fusion` with one
module per idiom in :mod:`.patterns`, :mod:`.compile`, :mod:`.launch`, :mod:`.optimizer`,
:mod:`.straggler`); :mod:`.verify` is ``hint.verify()``. This package module imports none of
them, so that reaching one (``Hint.verify`` reaches :mod:`.verify`) does not load the rest.
"""
