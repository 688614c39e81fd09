"""Does this checkout read traces exactly as another one does?

For every trace in ``tests/data/traces`` (and any files given), runs ``from_trace`` and
``table_from_trace`` of this checkout and of another (``--other``, default /work/main) in
fresh processes, and compares the result's ``to_dict()`` (less ``started_at``, and ``pid`` where it is
the reading process's own) and every column and fact of the event table. Prints one line per
file and exits 1 on any difference: what a change to the reader must keep.

    python benchmarks/same_results.py [--other DIR] [FILE ...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _plain(value: Any) -> Any:
    """``value`` as JSON-ready plain data (lists for any sequence or array, dicts with text keys)."""
    if isinstance(value, dict):
        return {repr(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "tolist"):
        return _plain(value.tolist())
    if hasattr(value, "__dataclass_fields__"):
        return {k: _plain(getattr(value, k)) for k in value.__dataclass_fields__}
    try:
        return [_plain(v) for v in value]  # array.array and other sequences
    except TypeError:
        return repr(value)


def _child(path: str) -> None:
    """Print this process's neuronscope's reading of ``path`` as JSON (digests of each part)."""
    from neuronscope.drive.traces import from_trace, table_from_trace

    out: dict[str, Any] = {}
    try:
        res = from_trace(path, executor=False, progress=False).to_dict()
        res.pop("started_at", None)
        if res.get("pid") == os.getpid():  # a trace naming no single process: this one's
            res.pop("pid")
        out["result"] = res
        table, meta = table_from_trace(path)
        out["meta"] = _plain(meta)
        out["table"] = _plain(table)
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    text = json.dumps(out, sort_keys=True, default=repr)
    parts = {k: hashlib.sha256(json.dumps(v, sort_keys=True, default=repr).encode()).hexdigest() for k, v in out.items()}
    print(json.dumps({"parts": parts, "size": len(text), "error": out.get("error")}))


def _run(repo: Path, path: Path) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(repo), PYTHONHASHSEED="0")
    proc = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(REPO / 'benchmarks')!r}); import same_results as s; s._child({str(path)!r})"],
        capture_output=True, text=True, env=env, cwd=str(repo), check=False,
    )
    try:
        return dict(json.loads(proc.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return {"crash": proc.stderr.strip()[-400:]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--other", type=Path, default=Path("/work/main"), help="the checkout to compare with")
    ap.add_argument("files", nargs="*", type=Path)
    args = ap.parse_args(argv)
    files = args.files or sorted((REPO / "tests" / "data" / "traces").glob("*.json*"))
    differ = 0
    for p in files:
        mine, theirs = _run(REPO, p), _run(args.other, p)
        same = mine == theirs
        differ += not same
        what = "same" if same else "DIFFERENT"
        print(f"{what:<9} {p.name}  {mine.get('error') or ''}")
        if not same:
            print(f"  this:  {mine}\n  other: {theirs}")
    print(f"{len(files) - differ} of {len(files)} the same")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
