"""Neuron's device-level profile, read through ``neuron-explorer`` after a capture.

The framework trace (``trace.json``) holds host and framework events; what ran on the
NeuronCores lives in the session's ``ntrace.pb`` / ``.ntff`` files, which only Neuron Explorer
decodes (Neuron docs: "How to profile a PyTorch workload", "Analyze profile output", "Profile
schema reference"). Where the tool is installed, neuronscope runs it on the capture's session
directory, bounded in time, writing inside the run:

- ``neuron-explorer view -d <session> --output-format summary-json --output-file <f>``: the
  ``Summary`` table's figures (MFU / HFU / MBU estimates, engine active shares, DMA, total
  time; "same fields, same values" as ``Summary.parquet``);
- ``neuron-explorer view -d <session> --ingest-only --data-path <p> --display-name <n>``: the
  parquet tables under ``<p>/profiles/global/<n>@latest/`` (the form a third party verified
  on trn2; parquet is the default format), of which ``SystemProfileEvents`` is read:
  ``nc_exec_running`` rows (``neuron_hw``) give each NeuronCore's busy and idle time and, by
  ``flow_id``, the device time of the op whose dispatch started that flow in the framework
  trace; ``nrt_model_submit`` / ``nc_model_switch`` rows count NEFF submissions and switches.

A missing, failing or slow tool, or no parquet reader (``pip install 'neuronscope[neuron]'``,
pyarrow), is a note: the capture is never lost for it. Figures are recorded under the names the
tool gives them (units as the schema reference gives them; ``total_time``'s is not stated).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from neuronscope.capture.explorer_tables import core_activity, device_ns_by_flow, ops_by_flow, read_parquet_rows, submissions

__all__ = [
    "BY_FLOW",
    "DEFAULT_TIMEOUT_S",
    "EXPLORER",
    "KEY_FIGURES",
    "device_profile",
    "device_profile_for_trace",
    "explorer_dir_name",
    "explorer_version",
    "find_explorer",
    "read_output",
    "read_summary",
    "summary_json",
]

EXPLORER = "neuron-explorer"
#: Where aws-neuronx-tools installs it (not on PATH by default; Neuron docs, troubleshooting).
INSTALL_DIRS = ("/opt/aws/neuron/bin",)
#: Longest time all of one capture's explorer runs may take together.
DEFAULT_TIMEOUT_S = 180.0
#: Where the tool's output goes, inside a run's Neuron directory, and its parts.
OUTPUT_DIR = "explorer"
SUMMARY_FILE = "summary.json"
DATA_DIR = "data"
#: The record's transient key: device ns per flow id, joined into the op table.
BY_FLOW = "_device_ns_by_flow"
#: Environment variable that overrides the time bound (seconds).
TIMEOUT_ENV = "NEURONSCOPE_EXPLORER_TIMEOUT_S"
#: The Summary figures a result's table shows first (profile schema reference); every numeric
#: figure the tool gives is recorded.
KEY_FIGURES = (
    "total_time",
    "mfu_estimated_percent",
    "hfu_estimated_percent",
    "mbu_estimated_percent",
    "total_active_time_percent",
    "tensor_engine_active_time_percent",
    "vector_engine_active_time_percent",
    "scalar_engine_active_time_percent",
    "gpsimd_engine_active_time_percent",
    "sync_engine_active_time_percent",
    "dma_active_time_percent",
    "spill_reload_bytes",
    "cc_op_time",
)


def explorer_dir_name(pid: int | None = None) -> str:
    """The explorer output's directory in a run's Neuron root: one per process where ranks
    share the root (``explorer_pid_<pid>``), else ``explorer``."""
    return OUTPUT_DIR if pid is None else f"{OUTPUT_DIR}_pid_{pid}"


def find_explorer(setting: str | bool | None = None) -> str | None:
    """The ``neuron-explorer`` to run: ``setting`` when it is a path (the ``neuron_explorer``
    option), none when it is False, else the one on PATH or in /opt/aws/neuron/bin."""
    if setting is False:
        return None
    if isinstance(setting, (str, os.PathLike)) and str(setting):
        path = Path(setting).expanduser()
        return str(path) if path.is_file() and os.access(path, os.X_OK) else None
    found = shutil.which(EXPLORER)
    if found:
        return found
    for d in INSTALL_DIRS:
        candidate = Path(d) / EXPLORER
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _timeout() -> float:
    try:
        return max(1.0, float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S)))
    except ValueError:
        return DEFAULT_TIMEOUT_S


def _run(cmd: list[str], deadline: float) -> tuple[subprocess.CompletedProcess[str] | None, str | None]:
    """Run ``cmd`` until ``deadline`` (monotonic); (process, None) or (None, why it failed)."""
    left = deadline - time.monotonic()
    if left <= 0:
        return None, "no time left in the explorer's bound"
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=left, stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {left:.0f} s ({TIMEOUT_ENV} raises the bound)"
    except OSError as err:
        return None, f"could not run ({err})"
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-1:] or ["no output"]
        return None, f"exit status {proc.returncode}: {tail[0][:300]}"
    return proc, None


def explorer_version(exe: str, timeout_s: float = 20.0) -> str | None:
    """The tool's own version line (``--version``: a GUESS at the flag), or None."""
    proc, _ = _run([exe, "--version"], time.monotonic() + timeout_s)
    if proc is None:
        return None
    line = (proc.stdout or proc.stderr).strip().splitlines()
    return line[0][:200] if line else None


def read_summary(text: str) -> list[dict[str, Any]]:
    """The Summary rows of a ``summary-json`` output: every object holding Summary figures
    (one per profile), its numeric and text fields kept. The layout around them (a list, an
    object keyed by profile) is not documented, so objects are found wherever they are."""
    try:
        data = json.loads(text)
    except ValueError:
        return []
    rows: list[dict[str, Any]] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if any(k in value for k in KEY_FIGURES):
                rows.append({k: v for k, v in value.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)})
                return
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(data)
    return rows


def summary_json(exe: str, session: Path, out_file: Path, deadline: float) -> tuple[str | None, str | None]:
    """``neuron-explorer view -d <session> --output-format summary-json --output-file <f>``
    until ``deadline`` (monotonic): (the JSON text, None) or (None, why it failed). A tool that
    prints the JSON rather than writing the file has it written there."""
    proc, why = _run(
        [exe, "view", "-d", str(session), "--output-format", "summary-json", "--output-file", str(out_file)], deadline
    )
    if proc is None:
        return None, why
    if not out_file.is_file():
        if not proc.stdout.strip():
            return None, "it wrote no summary"
        out_file.write_text(proc.stdout)
    return out_file.read_text(), None


def device_profile(
    exe: str, session: Path, out_dir: Path, display_name: str, trace: Path | None = None
) -> dict[str, Any]:
    """Run the tool on ``session`` with its output in ``out_dir`` and read it: the record a
    result carries (``summary``, ``cores``, ``ops``, ``regions``, ``submissions``, ``notes``)."""
    deadline = time.monotonic() + _timeout()
    record: dict[str, Any] = {"tool": exe, "version": explorer_version(exe), "session_dir": str(session), "notes": []}
    notes: list[str] = record["notes"]
    out_dir.mkdir(parents=True, exist_ok=True)
    _, why = summary_json(exe, session, out_dir / SUMMARY_FILE, deadline)
    if why is not None:
        notes.append(f"neuron-explorer summary-json failed: {why}")
    proc, why = _run(
        [exe, "view", "-d", str(session), "--ingest-only", "--data-path", str(out_dir / DATA_DIR), "--display-name", display_name],
        deadline,
    )
    if proc is None:
        notes.append(f"neuron-explorer parquet export failed: {why}")
    return read_output(out_dir, trace, record)


def read_output(out_dir: Path, trace: Path | None, record: dict[str, Any] | None = None) -> dict[str, Any]:
    """Read what neuron-explorer wrote into ``out_dir`` (``summary.json``, ``data/**/*.parquet``)
    into the record; ``trace``: the framework trace the executions are joined to by flow id."""
    record = record if record is not None else {"notes": []}
    notes: list[str] = record.setdefault("notes", [])
    summary_file = out_dir / SUMMARY_FILE
    if summary_file.is_file():
        rows = read_summary(summary_file.read_text())
        if rows:
            record["summary"] = rows[0]
            if len(rows) > 1:
                record["summary_rows"] = rows
        else:
            notes.append("neuron-explorer summary-json gave no Summary figures")
    data = out_dir / DATA_DIR
    tables = {p.stem: p for p in sorted(data.rglob("*.parquet"))} if data.is_dir() else {}
    if tables:
        record["tables"] = sorted(tables)
    events_file = tables.get("SystemProfileEvents")
    if events_file is None:
        if data.is_dir():
            notes.append(f"neuron-explorer wrote no SystemProfileEvents.parquet under {data}")
        return record
    try:
        events = read_parquet_rows(events_file)
        if "summary" not in record and "Summary" in tables:
            rows = read_parquet_rows(tables["Summary"])
            if rows:
                record["summary"] = {k: v for k, v in rows[0].items() if isinstance(v, (int, float, str))}
    except ImportError:
        notes.append("reading the parquet tables needs pyarrow: pip install 'neuronscope[neuron]'")
        return record
    except Exception as err:  # a table of another shape: a note, never the capture
        notes.append(f"could not read {events_file.name}: {type(err).__name__}: {err}")
        return record
    record["cores"] = core_activity(events)
    record["submissions"] = submissions(events)
    # Per flow, for the op table (events.flows.fold_system_profile takes it out of the record
    # before the result is built: one entry per execution is no part of result.json).
    record[BY_FLOW] = device_ns_by_flow(events)
    if trace is not None and trace.is_file():
        try:
            ops, regions, unmatched = ops_by_flow(trace, events)
        except (OSError, ValueError) as err:
            notes.append(f"could not join the device executions to {trace.name}: {err}")
        else:
            record["ops"], record["regions"] = ops, regions
            if unmatched:
                notes.append(
                    f"{unmatched} device execution(s) of the system profile match no dispatch of the "
                    "framework trace by flow id (launched outside the capture's ops)"
                )
    return record


def device_profile_for_trace(trace: Path, setting: str | bool | None = None) -> dict[str, Any] | None:
    """For ``from_trace`` on a Neuron session's framework trace: neuronscope's earlier
    explorer output for that run where there is one (``<root>/explorer`` above the
    ``<instance>_pid_<pid>/<timestamp>/`` session), else the tool run into a temporary
    directory (removed after: nothing is written beside the user's files); None where the
    trace is no Neuron session's or there is neither."""
    session = trace.parent
    if not any((session / m).is_file() for m in ("ntrace.pb", "trace_info.pb")):
        return None
    pid = session.parent.name.rpartition("_pid_")[2]
    names = [OUTPUT_DIR] + ([explorer_dir_name(int(pid))] if pid.isdigit() else [])
    for up in list(session.parents)[:2]:
        for name in names:
            earlier = up / name
            if (earlier / SUMMARY_FILE).is_file() or (earlier / DATA_DIR).is_dir():
                return read_output(earlier, trace, {"session_dir": str(session), "read_from": str(earlier), "notes": []})
    exe = find_explorer(setting)
    if exe is None:
        return None
    import tempfile

    with tempfile.TemporaryDirectory(prefix="neuronscope-explorer-") as tmp:
        return device_profile(exe, session, Path(tmp), "from_trace", trace)
