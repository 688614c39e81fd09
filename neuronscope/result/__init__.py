"""The result stage: what a capture measured, as plain values.

Takes the event table of :mod:`neuronscope.events`; gives per-op and per-region totals
(:mod:`.summary`, :mod:`.stats`) and the result types of the public contract
(:mod:`.types`: ``ProfileResult``, ``OpStat``, ``Hint``, ``Comparison``), which
:mod:`.serial` turns into JSON and back.
"""
