"""``python -m neuronscope.analysis.patterns``: derive every idiom's op orders and graph
templates from its spellings and keep them with the package (:data:`~.kept.ORDERS_FILE`,
:data:`~.kept.TEMPLATES_FILE`), after a spelling is added or changed; a test says when."""

from __future__ import annotations

from neuronscope.analysis.patterns import REGISTRY
from neuronscope.analysis.patterns.kept import ORDERS_FILE, TEMPLATES_FILE, orders_text, templates_text
from neuronscope.analysis.patterns.spelling import op_orders, order_shapes, templates, vector_choices


def main() -> None:
    declared = [p for p in REGISTRY if p.spellings]
    ORDERS_FILE.write_text(
        orders_text(
            {p.name: op_orders(p.spellings) for p in declared},
            {p.name: order_shapes(p.spellings) for p in declared},
            {p.name: vector_choices(p.spellings) for p in declared},
        )
    )
    matched = {}
    for p in REGISTRY:
        spellings = getattr(p.match, "derived_from", None)  # set by the generic matcher only
        if spellings is not None:
            matched[p.name] = templates(spellings)
    TEMPLATES_FILE.write_text(templates_text(matched))
    print(ORDERS_FILE, TEMPLATES_FILE)


if __name__ == "__main__":
    main()
