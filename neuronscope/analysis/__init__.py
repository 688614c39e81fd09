"""The analysis stage: hints, as pure functions over what a capture measured.

:func:`.rules.analyze` runs them over an :class:`.context.AnalysisContext`; one module per
rule (:mod:`.fusion` with one module per idiom in :mod:`.patterns`, :mod:`.compile`,
:mod:`.launch`, :mod:`.optimizer`, :mod:`.straggler`). This package module imports none of
them, so that reaching one does not load the rest. What runs torch to time something is the
capture stage's: ``hint.verify()`` (:mod:`neuronscope.capture.verify`), which a result
reaches without importing this stage, and ``neuronscope calibrate``'s probes
(:mod:`neuronscope.capture.machine`). Both time the idioms as :mod:`.patterns` declares them,
whose builders register with :mod:`neuronscope.capture.idioms` when the patterns are imported
(``import neuronscope`` does).
"""
