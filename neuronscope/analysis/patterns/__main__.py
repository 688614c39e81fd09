"""``python -m neuronscope.analysis.patterns``: derive every idiom's op orders from its
spellings and keep them in :data:`~.spelling.ORDERS_FILE` (after a spelling is added or changed;
a test says when)."""

from __future__ import annotations

from neuronscope.analysis.patterns import REGISTRY
from neuronscope.analysis.patterns.spelling import ORDERS_FILE, op_orders, orders_text


def main() -> None:
    ORDERS_FILE.write_text(orders_text({p.name: op_orders(p.spellings) for p in REGISTRY if p.spellings}))
    print(ORDERS_FILE)


if __name__ == "__main__":
    main()
