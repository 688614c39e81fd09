"""The export stage: results written to their run directories, and read back.

Takes :mod:`neuronscope.result` values; gives one new time-sorted directory per capture
(:mod:`.run_dir`, written through :mod:`.safe_io`), a comparison's directory
(:mod:`.comparison`), and ``load()`` of what was written (:mod:`.runs`).
"""
