"""The report stage: results rendered for people. Every function returns a string; none prints.

:mod:`.text` holds the terminal tables, :mod:`.diff` two results side by side, :mod:`.html`
the self-contained ``report.html`` page, and :mod:`.charts` its charts.
"""
