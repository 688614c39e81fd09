"""Two results op by op: time and calls side by side, ops that appeared or disappeared, and
the change in total."""

from __future__ import annotations

from typing import Any

from tabulate import tabulate

from .result import ProfileResult, _fmt_us

__all__ = ["diff_results", "render_diff"]


def diff_results(a: ProfileResult, b: ProfileResult) -> dict[str, Any]:
    """A JSON-ready diff of ``b`` against the baseline ``a``."""
    ops_a = {o.name: o for o in a.ops}
    ops_b = {o.name: o for o in b.ops}
    rows = []
    for name in list(ops_a) + [n for n in ops_b if n not in ops_a]:
        oa, ob = ops_a.get(name), ops_b.get(name)
        ta = oa.time_us if oa else 0.0
        tb = ob.time_us if ob else 0.0
        rows.append(
            {
                "op": name,
                "status": "removed" if ob is None else "added" if oa is None else "common",
                "time_a_us": ta,
                "time_b_us": tb,
                "delta_us": tb - ta,
                "calls_a": oa.calls if oa else 0,
                "calls_b": ob.calls if ob else 0,
            }
        )
    rows.sort(key=lambda r: abs(r["delta_us"]), reverse=True)
    total_a, total_b = a.total_op_us, b.total_op_us
    return {
        "a": {"name": a.name, "run_dir": a.run_dir, "backend": a.backend, "total_us": total_a, "wall_time_us": a.wall_time_us},
        "b": {"name": b.name, "run_dir": b.run_dir, "backend": b.backend, "total_us": total_b, "wall_time_us": b.wall_time_us},
        "total_delta_us": total_b - total_a,
        "total_ratio": (total_b / total_a) if total_a else None,
        "ops": rows,
        "added": [r["op"] for r in rows if r["status"] == "added"],
        "removed": [r["op"] for r in rows if r["status"] == "removed"],
    }


def render_diff(d: dict[str, Any], row_limit: int = 25) -> str:
    table = [
        [
            r["op"],
            r["status"],
            _fmt_us(r["time_a_us"]),
            _fmt_us(r["time_b_us"]),
            ("+" if r["delta_us"] >= 0 else "-") + _fmt_us(abs(r["delta_us"])),
            f"{r['calls_a']} -> {r['calls_b']}",
        ]
        for r in d["ops"][:row_limit]
    ]
    ratio = d["total_ratio"]
    head = (
        f"A: {d['a']['name']} ({d['a']['backend']}) total {_fmt_us(d['a']['total_us'])}\n"
        f"B: {d['b']['name']} ({d['b']['backend']}) total {_fmt_us(d['b']['total_us'])}\n"
        f"change: {'+' if d['total_delta_us'] >= 0 else '-'}{_fmt_us(abs(d['total_delta_us']))}"
        + (f" ({ratio:.2f}x)" if ratio is not None else "")
    )
    body = tabulate(table, headers=["Op", "Status", "A", "B", "Change", "Calls"], tablefmt="simple", disable_numparse=True)
    extra = ""
    if d["added"]:
        extra += "\nappeared in B: " + ", ".join(d["added"])
    if d["removed"]:
        extra += "\ngone in B: " + ", ".join(d["removed"])
    return f"{head}\n\n{body}{extra}\n"
