"""The drivers: what runs a capture around the user's code and hands back its result.

Takes the options and the user's call; gives :class:`~neuronscope.result.types.ProfileResult`
values. :mod:`.scope` and :mod:`.window` decide which calls are captured, :mod:`.session` runs
one outermost capture through the stages below (capture, events, result, analysis, export),
:mod:`.pipeline` and :mod:`.traces` build results from a finished profiler or trace files, and
:mod:`.distributed` joins the ranks of a torchrun job.
"""
