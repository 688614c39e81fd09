"""The result stage: what a capture measured, as plain values.

Takes the event table of :mod:`neuronscope.events`; gives per-op and per-region totals
(:mod:`.summary`, with the ranges around each event in :mod:`.ranges`) and the result types of the public contract, one module each
(:mod:`.types`: ``ProfileResult``; :mod:`.stats`: ``OpStat``, ``RegionStat``; :mod:`.hint`:
``Hint``; :mod:`.comparison`: ``Comparison``), which :mod:`.serial` turns into JSON and back
and :mod:`.text` renders as text (``table()`` composes it; it never imports the types back).
"""
