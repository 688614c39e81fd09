"""The report stage: results rendered for people. Every function returns a string; none prints.

The terminal tables of a result are the result stage's own (:mod:`neuronscope.result.text`);
here :mod:`.diff` puts two results side by side, :mod:`.html`
the self-contained ``report.html`` page, and :mod:`.charts` its charts.
"""
