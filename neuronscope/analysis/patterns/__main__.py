"""``python -m neuronscope.analysis.patterns``: derive every idiom's op orders and graph
templates from its spellings and keep them with the package (:data:`~.spelling.ORDERS_FILE`,
:data:`~.spelling.TEMPLATES_FILE`), after a spelling is added or changed; a test says when."""

from __future__ import annotations

from neuronscope.analysis.patterns import REGISTRY
from neuronscope.analysis.patterns.spelling import ORDERS_FILE, TEMPLATES_FILE, op_orders, orders_text, templates, templates_text


def main() -> None:
    ORDERS_FILE.write_text(orders_text({p.name: op_orders(p.spellings) for p in REGISTRY if p.spellings}))
    matched = {}
    for p in REGISTRY:
        spellings = getattr(p.match, "derived_from", None)  # set by the generic matcher only
        if spellings is not None:
            matched[p.name] = templates(spellings)
    TEMPLATES_FILE.write_text(templates_text(matched))
    print(ORDERS_FILE, TEMPLATES_FILE)


if __name__ == "__main__":
    main()
