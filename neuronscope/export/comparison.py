"""A comparison's run directory: result.json, summary.txt, one trace per variant, and every
variant on one timeline in ``trace.json.gz``.

Labels become file names through :func:`neuronscope.export.safe_name`, which maps different
labels to one name (``"fused (v1)"`` and ``"fused [v1]"``); :func:`file_stems` makes them
unique, so no variant's trace or session files overwrite another's.
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from neuronscope.config import Options
from neuronscope.export import run_dir as _export
from neuronscope.export import trace_out
from neuronscope.result.comparison import Comparison
from neuronscope.result.types import ProfileResult

__all__ = ["adopt_session_files", "export_comparison", "file_stems", "merged_trace"]


def file_stems(labels: Iterable[str]) -> dict[str, str]:
    """One distinct file-name stem per label: ``safe_name(label)``, then ``-2``, ``-3`` ...
    for a label whose stem an earlier label took (compared without case, for file systems
    that ignore it)."""
    taken: set[str] = set()
    stems: dict[str, str] = {}
    for label in labels:
        base = _export.safe_name(label)
        stem, n = base, 1
        while stem.lower() in taken:
            n += 1
            stem = f"{base}-{n}"
        taken.add(stem.lower())
        stems[label] = stem
    return stems


def merged_trace(traces: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """All variants on one timeline (their profiled calls ran one after another in this
    process). Each variant's profiler span is renamed after it; repeated metadata events
    appear once."""
    merged: list[Any] = []
    seen_meta: set[str] = set()
    base: int | None = None
    extra: dict[str, Any] = {}
    for label, trace in traces.items():
        shift_us = 0.0
        this_base = trace.get("baseTimeNanoseconds")
        if isinstance(this_base, int):
            if base is None:
                base = this_base
            shift_us = (this_base - base) / 1e3
        for key in ("schemaVersion", "deviceProperties", "record_shapes"):
            if key in trace and key not in extra:
                extra[key] = trace[key]
        for ev in trace.get("traceEvents", []):
            if not isinstance(ev, dict):
                continue
            if ev.get("ph") == "M":
                key = json.dumps(ev, sort_keys=True, default=str)
                if key in seen_meta:
                    continue
                seen_meta.add(key)
            if shift_us and isinstance(ev.get("ts"), (int, float)):
                ev = {**ev, "ts": ev["ts"] + shift_us}
            if ev.get("cat") == "Trace" and str(ev.get("name", "")).startswith("PyTorch Profiler"):
                ev = {**ev, "name": f"PyTorch Profiler ({label})"}
            merged.append(ev)
    out: dict[str, Any] = {**extra, "traceEvents": merged, "displayTimeUnit": "us"}
    if base is not None:
        out["baseTimeNanoseconds"] = base
    return out


def adopt_session_files(result: ProfileResult, run_dir: Path, stem: str) -> ProfileResult:
    """Move a variant's Neuron session files (ntff, neff, ntrace.pb), which its unexported
    capture left in a temporary directory, into ``run_dir/neuron/<stem>`` so that they belong
    to the comparison's run; return ``result`` with its record and notes pointing at their new
    place (``result`` itself unchanged; returned as it is where there was nothing to move).
    ``stem`` is the variant's file-name stem (:func:`file_stems`)."""
    info = result.artifacts.get("neuron")
    if not isinstance(info, dict):
        return result
    src_text = info.get("output_dir")
    if not isinstance(src_text, str) or not Path(src_text).is_absolute() or not Path(src_text).is_dir():
        return result
    dest = run_dir / "neuron" / stem
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(src_text, dest)
    moved = {k: v.replace(src_text, str(dest)) if isinstance(v, str) else v for k, v in info.items()}
    moved["output_dir"] = dest.relative_to(run_dir).as_posix()
    notes = [n.replace(src_text, str(dest)) for n in result.notes if not (n.startswith("export=False") and src_text in n)]
    return replace(result, artifacts={**result.artifacts, "neuron": moved}, notes=notes)


def export_comparison(cmp: Comparison, profs: dict[str, Any], options: Options, summary: str) -> Comparison:
    """Write ``cmp`` as one run directory and return it as written (``cmp`` itself is not
    changed): result.json (the Comparison with each variant's result, all with the run's
    ``run_dir``), ``summary`` as summary.txt, ``trace_<stem>.json.gz`` per profiled variant
    (its ``artifacts["trace"]``) and ``trace.json.gz`` holding them all. On failure the
    partial directory is removed (unless session files moved in already) and the error raised."""
    run_dir = _export.new_run_dir(options.output_root, cmp.name)
    stems = file_stems(cmp.results)
    try:
        traces: dict[str, dict[str, Any]] = {}
        results: dict[str, ProfileResult] = {}
        for label, result in cmp.results.items():
            artifacts = dict(result.artifacts)
            prof = profs.get(label)
            if prof is not None:
                # Before the session files move: the Neuron backend's saved trace is among them.
                fname = f"trace_{stems[label]}.json.gz"
                raw = run_dir / f".trace_{stems[label]}.json"
                try:
                    trace_out.save_chrome_trace(prof, raw)
                    traces[label] = json.loads(raw.read_text())
                    trace_out.gzip_file(raw, run_dir / fname)
                finally:
                    raw.unlink(missing_ok=True)
                artifacts["trace"] = fname
            placed = replace(result, run_dir=str(run_dir), artifacts=artifacts)
            results[label] = adopt_session_files(placed, run_dir, stems[label])
        if traces:
            payload = json.dumps(merged_trace(traces)).encode()

            def write_trace(tmp: Path) -> None:
                with gzip.open(tmp, "wb", compresslevel=1) as fh:
                    fh.write(payload)

            _export.atomic_write_with(run_dir / "trace.json.gz", write_trace)
        return _export.fill_run(run_dir, replace(cmp, results=results), summary=summary)
    except Exception:
        if not (run_dir / "neuron").is_dir():  # never delete measurements moved in already
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
