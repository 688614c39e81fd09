"""``neuronscope doctor``: record, on a Trainium host, what no Neuron document settles.

One JSON file a user can attach to a bug report, and that the test suite can load as a fixture
(``tests/data/neuron_doctor/``: every file of this shape there runs through the same tests).
It holds:

- versions and the environment variables that change profiling;
- ``NeuronConfig`` / ``ProfileMode`` / ``NeuronProfiler`` (and ``export_trace``): type, MRO,
  signature, whether a config is an ``_ExperimentalConfig``, the members' value types;
- which optional ``NeuronConfig`` keywords the build accepts, each tried on its own, and how an
  unknown keyword fails (type and message);
- one ``[CPU, PrivateUse1]`` capture of a small matmul with ``NeuronConfig`` +
  ``NeuronProfiler.export_trace``: the activity types torch.profiler received, the files
  written, ``key_averages().table()``, and a slice of the framework trace (privateuse1 events,
  their flows and the ops around them) that is itself a Chrome trace ``from_trace`` reads;
- ``neuron-explorer``'s version and one ``summary-json`` output (the capture's session);
- what a ``[CPU]``-only capture writes into a fresh working directory's ``./output``.

On a host without torch-neuronx it prints what it would do and writes nothing.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import importlib.util
import inspect
import json
import os
import platform
import shutil
import socket
import sys
import tempfile
import traceback
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from neuronscope.capture import torch_private
from neuronscope.export.safe_io import atomic_write_text

__all__ = ["DOCTOR_SCHEMA", "REPORT_KEYS", "doctor_trace", "load_doctor_report", "run_doctor"]

DOCTOR_SCHEMA = 1
#: The top-level keys of a report (a fixture of this shape is what tests load).
REPORT_KEYS = ("schema", "kind", "created", "host", "versions", "environment", "api", "keywords", "capture", "cpu_only_capture")
#: Framework-trace events kept in the slice: enough to see the shape, small enough to attach.
TRACE_SLICE_EVENTS = 300
_ENV_PREFIXES = ("NEURON_", "TORCH_NEURONX_", "XLA_", "TORCH_DEVICE_BACKEND_AUTOLOAD", "NKI_")
_OPTIONAL_KEYWORDS: Mapping[str, Any] = MappingProxyType({
    "correlate_device_time": True,
    "max_events_per_nc": 100_000,
    "capture_enabled_for_nc": "0",
    "precache_node_info": True,
})
PLAN = """neuronscope doctor: torch-neuronx is not installed here, so there is nothing to record.
On a Trainium host (Trn2/Trn3, TorchNeuron 2.13.3.0 or later) it would write one JSON file with:
  1. NeuronConfig / ProfileMode / NeuronProfiler: types, signatures, value types;
  2. which optional NeuronConfig keywords the build accepts (correlate_device_time,
     max_events_per_nc, capture_enabled_for_nc, neff_cache_dir, precache_node_info) and how
     an unknown keyword fails;
  3. one [CPU, PrivateUse1] torch.profiler capture of a small matmul on the neuron device:
     activity types received, files written, key_averages() table, a slice of trace.json;
  4. neuron-explorer's version and its summary-json output for that capture's session;
  5. what a [CPU]-only capture writes into ./output of a fresh directory.
Run it there in a fresh directory, and attach the file to your report:
  env -u NEURON_RT_INSPECT_ENABLE python -m neuronscope doctor"""


def _err(err: BaseException) -> dict[str, str]:
    return {"error_type": type(err).__name__, "message": str(err)[:2000]}


def _describe(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"repr": repr(obj)[:300], "type": f"{type(obj).__module__}.{type(obj).__qualname__}"}
    if isinstance(obj, type):
        out["mro"] = [f"{c.__module__}.{c.__qualname__}" for c in obj.__mro__]
    try:
        out["signature"] = str(inspect.signature(obj))
    except (TypeError, ValueError) as err:
        out["signature"] = None
        out["signature_error"] = _err(err)
    doc = inspect.getdoc(obj)
    out["doc"] = doc.splitlines()[0][:300] if doc else None
    return out


@contextlib.contextmanager
def _cwd(path: Path) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def _walk(root: Path) -> list[dict[str, Any]]:
    if not root.is_dir():
        return []
    return [
        {"path": p.relative_to(root).as_posix(), "bytes": p.stat().st_size}
        for p in sorted(root.rglob("*"))
        if p.is_file()
    ][:2000]


def _api(profiling: Any) -> dict[str, Any]:
    api: dict[str, Any] = {}
    for name in ("NeuronConfig", "ProfileMode", "NeuronProfiler"):
        obj = getattr(profiling, name, None)
        api[name] = None if obj is None else _describe(obj)
    profiler = getattr(profiling, "NeuronProfiler", None)
    export = getattr(profiler, "export_trace", None)
    api["NeuronProfiler.export_trace"] = None if export is None else _describe(export)
    modes = getattr(profiling, "ProfileMode", None)
    if modes is not None:
        members: dict[str, Any] = {}
        for name in dir(modes):
            if name.isupper():
                value = getattr(getattr(modes, name), "value", getattr(modes, name))
                members[name] = {"value": repr(value)[:100], "value_type": type(value).__name__}
        api["ProfileMode_members"] = members
    return api


def _keywords(profiling: Any, tmp: Path) -> tuple[dict[str, Any], Any]:
    """Each optional keyword on its own over the required ones; an unknown one; the base config."""
    _ExperimentalConfig = torch_private.experimental_config_class()
    config_cls = profiling.NeuronConfig
    base = {"modes": [profiling.ProfileMode.RUNTIME], "profile_output_dir": str(tmp / "keywords")}
    out: dict[str, Any] = {}
    try:
        config = config_cls(**base)
    except Exception as err:
        out["base"] = {"accepted": False, **_err(err)}
        return out, None
    out["base"] = {
        "accepted": True,
        "is_experimental_config": isinstance(config, _ExperimentalConfig),
        "custom_profiler_config": repr(getattr(config, "custom_profiler_config", None))[:500],
        "attributes": sorted(a for a in dir(config) if not a.startswith("__"))[:100],
    }
    tried = dict(_OPTIONAL_KEYWORDS, neff_cache_dir=str(tmp / "neff_cache"))
    for key, value in tried.items():
        try:
            config_cls(**base, **{key: value})
        except Exception as err:
            out[key] = {"accepted": False, **_err(err)}
        else:
            out[key] = {"accepted": True}
    try:
        config_cls(**base, neuronscope_bogus_keyword=1)
    except Exception as err:
        out["unknown_keyword"] = {"accepted": False, **_err(err)}
    else:
        out["unknown_keyword"] = {"accepted": True}
    return out, config


def _tensors(torch: Any) -> tuple[Any, Any, str, str | None]:
    try:
        a = torch.randn(64, 64, device="neuron")
        return a, torch.randn(64, 64, device="neuron"), "neuron", None
    except Exception as err:
        why = f"{type(err).__name__}: {err}"
        return torch.randn(64, 64), torch.randn(64, 64), "cpu", why[:500]


def trace_slice(trace: dict[str, Any], limit: int = TRACE_SLICE_EVENTS) -> dict[str, Any]:
    """The privateuse1 events of a framework trace, their flow events and the ops that hold
    them, as a Chrome trace of its own (``from_trace`` reads it)."""
    events = [e for e in trace.get("traceEvents", []) if isinstance(e, dict)]
    neuron = [e for e in events if str(e.get("cat", "")).startswith("privateuse1")][:limit]
    flow_ids = {e.get("id") for e in events if e.get("ph") in ("s", "f", "t")}
    flows = [e for e in events if e.get("ph") in ("s", "f", "t") and e.get("id") in flow_ids][: 2 * limit]
    threads = {(e.get("pid"), e.get("tid")) for e in neuron}
    if neuron:
        lo = min(float(e.get("ts", 0)) for e in neuron)
        hi = max(float(e.get("ts", 0)) + float(e.get("dur", 0)) for e in neuron)
    else:
        lo = hi = 0.0
    ops = [
        e for e in events
        if e.get("cat") in ("cpu_op", "user_annotation") and (e.get("pid"), e.get("tid")) in threads
        and float(e.get("ts", 0)) <= hi and float(e.get("ts", 0)) + float(e.get("dur", 0)) >= lo
    ][:limit]
    meta = {k: v for k, v in trace.items() if k != "traceEvents"}
    return {**meta, "traceEvents": ops + neuron + flows}


def _capture(torch: Any, profiling: Any, config_cls: Any, tmp: Path) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    out: dict[str, Any] = {}
    root = tmp / "capture"
    a, b, device, why = _tensors(torch)
    out["device"] = device
    if why:
        out["device_error"] = why
    sync = getattr(getattr(torch, "neuron", None), "synchronize", None)
    for _ in range(3):  # warm-up: the NEFF compiles here, not in the capture
        (a @ b).relu()
    if sync is not None:
        sync()
    config = config_cls(modes=[profiling.ProfileMode.RUNTIME], profile_output_dir=str(root))
    exporter = profiling.NeuronProfiler(config)
    exported: list[str] = []

    def on_ready(prof: Any) -> None:
        try:
            exporter.export_trace(prof)
            exported.append("export_trace")
        except Exception as err:
            out["export_trace_error"] = _err(err)

    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
        experimental_config=config,
        on_trace_ready=on_ready,
        record_shapes=True,
    ) as prof:
        (a @ b).relu().sum()
        if sync is not None:
            sync()
    raw = torch_private.kineto_results(prof).events()
    out["activity_types"] = dict(Counter(e.activity_type() for e in raw))
    out["device_types"] = dict(Counter(str(e.device_type()) for e in raw))
    out["events"] = [
        {
            "name": e.name(), "activity": e.activity_type(), "device_type": str(e.device_type()),
            "thread": e.start_thread_id(), "correlation": e.correlation_id(),
            "linked_correlation": e.linked_correlation_id(), "duration_ns": e.duration_ns(),
        }
        for e in raw
    ][:TRACE_SLICE_EVENTS]
    out["files"] = _walk(root)
    try:
        out["key_averages"] = prof.key_averages().table(row_limit=15)
    except Exception as err:
        out["key_averages_error"] = _err(err)
    traces = sorted(root.rglob("*.json"))
    out["trace_files"] = [p.relative_to(root).as_posix() for p in traces]
    if traces:
        try:
            out["trace_slice"] = trace_slice(json.loads(traces[0].read_text()))
        except (OSError, ValueError) as err:
            out["trace_slice_error"] = _err(err)
    return out


def _cpu_only(torch: Any, tmp: Path) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    fresh = tmp / "cpu_only"
    fresh.mkdir()
    with _cwd(fresh), profile(activities=[ProfilerActivity.CPU]) as prof:
        (torch.randn(64, 64) @ torch.randn(64, 64)).relu().sum()
    raw = torch_private.kineto_results(prof).events()
    return {
        "activity_types": dict(Counter(e.activity_type() for e in raw)),
        "files_in_cwd": _walk(fresh),
        "wrote_output_dir": (fresh / "output").exists(),
    }


#: Characters of the summary-json output kept in a report.
SUMMARY_JSON_CHARS = 20_000


def _explorer(root: Path, tmp: Path) -> dict[str, Any]:
    """neuron-explorer's version and its summary-json output for the capture's session (the
    Summary figures a result carries): what a user's report gives the tests as a fixture."""
    import time

    from neuronscope.capture.neuron_explorer import explorer_version, find_explorer, read_summary, summary_json

    exe = find_explorer()
    if exe is None:
        return {"path": None, "note": "no neuron-explorer on PATH or in /opt/aws/neuron/bin"}
    out: dict[str, Any] = {"path": exe, "version": explorer_version(exe)}
    sessions = sorted({p.parent for p in root.rglob("ntrace.pb")} | {p.parent for p in root.rglob("trace_info.pb")})
    if not sessions:
        out["summary_json_error"] = f"no session directory (ntrace.pb / trace_info.pb) under {root}"
        return out
    out["session"] = sessions[-1].relative_to(root).as_posix()
    text, why = summary_json(exe, sessions[-1], tmp / "summary.json", time.monotonic() + 120)
    if text is None:
        out["summary_json_error"] = why
        return out
    out["summary_json"] = text[:SUMMARY_JSON_CHARS]
    out["summary_json_truncated"] = len(text) > SUMMARY_JSON_CHARS
    out["summary_rows"] = read_summary(text)
    return out


def _section(report: dict[str, Any], key: str, fn: Any, *args: Any) -> Any:
    """Run one part; a failure is recorded in the report instead of ending it."""
    try:
        value = fn(*args)
    except Exception as err:
        report[key] = {"failed": True, **_err(err), "traceback": traceback.format_exc()[-3000:]}
        return None
    report[key] = value
    return value


def run_doctor(out: Path | None = None) -> tuple[dict[str, Any] | None, Path | None]:
    """Probe the installed TorchNeuron and write the report; ``(None, None)`` without one."""
    if importlib.util.find_spec("torch_neuronx") is None:
        return None, None
    import torch

    report: dict[str, Any] = {
        "schema": DOCTOR_SCHEMA,
        "kind": "neuronscope-doctor",
        "created": _dt.datetime.now().isoformat(timespec="seconds"),
        "host": {"hostname": socket.gethostname(), "platform": platform.platform()},
        "environment": {k: v for k, v in sorted(os.environ.items()) if k.startswith(_ENV_PREFIXES)},
        "torch_neuronx_loaded_by_import_torch": "torch_neuronx" in sys.modules,
    }
    import torch_neuronx

    report["versions"] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_neuronx": getattr(torch_neuronx, "__version__", None),
        "privateuse1_backend": torch_private.privateuse1_backend_name(),
        "supported_activities": [str(a) for a in torch.profiler.supported_activities()],
        "neuron_explorer": shutil.which("neuron-explorer") or shutil.which("/opt/aws/neuron/bin/neuron-explorer"),
    }
    try:
        from torch_neuronx import profiling
    except Exception as err:
        report.update(api={"failed": True, **_err(err)}, keywords=None, capture=None, cpu_only_capture=None)
        return report, _write(report, out)
    with tempfile.TemporaryDirectory(prefix="neuronscope-doctor-") as tmp_name:
        tmp = Path(tmp_name)
        _section(report, "api", _api, profiling)
        if getattr(profiling, "NeuronConfig", None) is None:
            report.update(keywords=None, capture=None)
        else:
            _section(report, "keywords", lambda: _keywords(profiling, tmp)[0])
            _section(report, "capture", _capture, torch, profiling, profiling.NeuronConfig, tmp)
            _section(report, "neuron_explorer", _explorer, tmp / "capture", tmp)
        _section(report, "cpu_only_capture", _cpu_only, torch, tmp)
    return report, _write(report, out)


def _write(report: dict[str, Any], out: Path | None) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = out or Path(f"neuronscope-doctor-{socket.gethostname()}-{stamp}.json")
    # Through the directory's descriptor, to an exclusive temporary name renamed into place: a
    # link planted at this predictable name is replaced, never followed.
    atomic_write_text(path, json.dumps(report, indent=1, default=str) + "\n")
    return path


def load_doctor_report(path: Path | str) -> dict[str, Any]:
    """Read a doctor report (or a test fixture made from one) and check its shape."""
    from neuronscope.errors import NeuronscopeError

    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or data.get("kind") != "neuronscope-doctor":
        raise NeuronscopeError(f"{path}: not a neuronscope doctor report")
    missing = [k for k in REPORT_KEYS if k not in data]
    if missing:
        raise NeuronscopeError(f"{path}: doctor report lacks {', '.join(missing)}")
    return data


def doctor_trace(report: dict[str, Any], dest: Path) -> Path | None:
    """Write the report's framework-trace slice as a Chrome trace file (for ``from_trace``)."""
    trace = (report.get("capture") or {}).get("trace_slice")
    if not trace:
        return None
    atomic_write_text(dest, json.dumps(trace))
    return dest


def main(out: str | None = None) -> int:
    """The CLI command: 0 with or without Neuron (without, it prints what it would do)."""
    report, path = run_doctor(Path(out) if out else None)
    if report is None:
        print(PLAN)
        return 0
    capture = report.get("capture") or {}
    print(f"neuronscope doctor: torch-neuronx {report['versions'].get('torch_neuronx')}, torch {report['versions']['torch']}")
    if capture.get("activity_types"):
        print(f"  capture: activity types {capture['activity_types']}")
    explorer = report.get("neuron_explorer") or {}
    if explorer.get("path"):
        rows = len(explorer.get("summary_rows") or [])
        print(f"  neuron-explorer {explorer.get('version')}: summary-json {rows} row(s)"
              + (f" ({explorer['summary_json_error']})" if explorer.get("summary_json_error") else ""))
    cpu = report.get("cpu_only_capture") or {}
    if "wrote_output_dir" in cpu:
        print(f"  CPU-only capture wrote ./output: {cpu['wrote_output_dir']}")
    print(f"wrote {path}: attach it to your bug report")
    return 0
