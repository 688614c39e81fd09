"""The Neuron runtime's session files: found, checked, completed with NEFFs, and kept out of
the user's working directory.

The runtime writes ``<root>/<instance-id>_pid_<pid>/<19-digit ns timestamp>/`` holding
``ntrace.pb``, ``trace_info.pb``, ``cpu_util.pb``, ``host_mem.pb``,
``profile_nc_<n>_session_<k>.ntff``, ``neff_<id>_vnc_<n>.neff`` and the framework
``trace.json`` (Neuron docs, "Expected output"; a real run's directory names). Earlier
runtimes left out the timestamp level, so the search is recursive. Nothing here imports torch
or torch-neuronx.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from pathlib import Path
from types import MappingProxyType
from typing import Any

from neuronscope.announce import first_time

__all__ = [
    "DEFAULT_NEFF_CACHE",
    "NEFF_CACHE_ENV",
    "StrayRuntimeOutput",
    "check_session",
    "copy_neffs",
    "dropped_events_note",
    "explorer_notes",
    "file_kind",
    "find_session_files",
    "neff_cache_dir",
    "neff_cache_size",
    "neffs_written_since",
    "own_framework_trace",
    "place_framework_trace",
    "session_dirs",
    "without_placed_copies",
]

#: Where TorchNeuron keeps compiled NEFFs, and its fallback (TorchNeuron docs, env-vars page).
NEFF_CACHE_ENV = "TORCH_NEURONX_NEFF_CACHE_DIR"
DEFAULT_NEFF_CACHE = "/tmp/neff_cache"
#: NEFFs copied into a run are capped: eager mode compiles about one NEFF per op, and the
#: host-wide cache is shared by every run, so a run directory must not grow by gigabytes.
MAX_NEFF_COPY_BYTES = 1 << 30
MAX_NEFF_COPY_FILES = 2000
#: ``result.json`` lists at most this many session files; the count of the rest is recorded.
MAX_LISTED_FILES = 1000
#: Where the runtime writes when nobody configured it (nrt_profile.h; env-var capture).
RUNTIME_DEFAULT_OUTPUT = "./output"
RUNTIME_OUTPUT_ENV = "NEURON_RT_INSPECT_OUTPUT_DIR"

_NAMED_KINDS = MappingProxyType({
    "ntrace.pb": "system_trace",
    "trace_info.pb": "trace_info",
    "cpu_util.pb": "cpu_util",
    "host_mem.pb": "host_memory",
    "trace.json": "framework_trace",
    "trace.json.gz": "framework_trace",
})
_SESSION_MARKERS = ("trace_info.pb", "ntrace.pb")
FRAMEWORK_TRACE_NAME = "trace.json"
#: The framework trace's names across the docs: ``trace.json`` (how-to, glossary),
#: ``neuron_framework_trace_rank_<N>.json`` (troubleshooting), ``plugins/*/trace.json.gz``
#: (the profile schema skill); the last is compressed.
_RANK_TRACE = re.compile(r"^neuron_framework_trace_rank_\d+\.json(\.gz)?$")


def file_kind(name: str) -> str:
    """What a session file is, by its name."""
    if name in _NAMED_KINDS:
        return _NAMED_KINDS[name]
    if name.endswith(".ntff"):
        return "device_trace"
    if name.endswith(".neff"):
        return "neff"
    if _RANK_TRACE.match(name):
        return "framework_trace"
    if name.endswith(".pb"):
        return "runtime_data"
    return "other"


def place_framework_trace(trace: Path, session: Path) -> Path:
    """``trace`` as ``<session>/trace.json``, where Neuron Explorer looks for it (docs, glossary:
    "must be in the same directory as system trace files"); a compressed one is decompressed.
    Returns the plain file (``trace`` itself where it is one already)."""
    target = session / FRAMEWORK_TRACE_NAME
    if trace == target:
        return trace
    if not target.exists():
        if trace.name.endswith(".gz"):
            import gzip

            with gzip.open(trace, "rb") as src, open(target, "wb") as dest:
                shutil.copyfileobj(src, dest)
        else:
            shutil.copyfile(trace, target)
        return target
    return trace if not trace.name.endswith(".gz") else target


def without_placed_copies(found: list[Path]) -> list[Path]:
    """Framework traces found in a Neuron output tree, less the copies of one another: where a
    session directory (one with ``ntrace.pb`` / ``trace_info.pb``) holds ``trace.json``, that
    file is its framework trace, and a ``plugins/*/trace.json.gz`` under it or a
    ``neuron_framework_trace_rank_<N>.json`` with the same bytes (what
    :func:`place_framework_trace` copied) is the same trace a second time."""
    sessions = {
        p.parent for p in found
        if p.name == FRAMEWORK_TRACE_NAME and any((p.parent / m).is_file() for m in _SESSION_MARKERS)
    }
    if not sessions:
        return found
    placed = [s / FRAMEWORK_TRACE_NAME for s in sessions]
    out: list[Path] = []
    for p in found:
        own = p.parent in sessions and p.name == FRAMEWORK_TRACE_NAME
        inside = any(s in p.parents for s in sessions)  # plugins/*/trace.json.gz of a session
        copied = bool(_RANK_TRACE.match(p.name)) and not p.name.endswith(".gz") and any(_same_bytes(p, q) for q in placed)
        if own or not (inside or copied):
            out.append(p)
    return out


def _same_bytes(a: Path, b: Path) -> bool:
    import filecmp

    try:
        return a.stat().st_size == b.stat().st_size and filecmp.cmp(a, b, shallow=False)
    except OSError:
        return False


def own_framework_trace(files: list[Path], rank: int | None) -> Path | None:
    """The newest framework trace among ``files`` that this rank wrote: another rank's
    ``neuron_framework_trace_rank_<N>.json`` (in a root all ranks share, every rank's sits at
    its top) is left out, where the newest of all was taken for this rank's. The docs match
    rank N's file to rank N (troubleshooting, multi-rank)."""
    own = None if rank is None else f"neuron_framework_trace_rank_{rank}.json"
    found = [
        f for f in files
        if file_kind(f.name) == "framework_trace"
        and (own is None or not _RANK_TRACE.match(f.name) or f.name.removesuffix(".gz") == own)
    ]
    return max(found, key=lambda p: p.stat().st_mtime, default=None)


def find_session_files(root: Path, pid: int | None = None) -> list[Path]:
    """Every file under ``root``, recursively; with ``pid``, only that process's
    ``*_pid_<pid>`` directories and the files at the top (a shared multi-rank root)."""
    if not root.is_dir():
        return []
    if pid is None:
        return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    found: list[Path] = []
    for entry in root.iterdir():
        if entry.is_file() and not entry.is_symlink():
            found.append(entry)
        elif entry.is_dir() and entry.name.endswith(f"_pid_{pid}"):
            found.extend(p for p in entry.rglob("*") if p.is_file() and not p.is_symlink())
    return sorted(found)


def session_dirs(files: list[Path]) -> list[Path]:
    """Directories holding a runtime trace (``trace_info.pb``/``ntrace.pb``) or device traces,
    newest first."""
    dirs: dict[Path, float] = {}
    for f in files:
        if f.name in _SESSION_MARKERS or f.suffix == ".ntff":
            try:
                dirs[f.parent] = max(dirs.get(f.parent, 0.0), f.stat().st_mtime)
            except OSError:
                continue
    return sorted(dirs, key=lambda d: (dirs[d], str(d)), reverse=True)


# ---- NEFFs --------------------------------------------------------------------------------


def neff_cache_dir() -> Path:
    """Where this process's NEFFs are cached (``TORCH_NEURONX_NEFF_CACHE_DIR`` or /tmp/neff_cache)."""
    return Path(os.environ.get(NEFF_CACHE_ENV) or DEFAULT_NEFF_CACHE)


def _neffs_newest_first(cache: Path) -> list[Path]:
    try:
        found = [p for p in cache.rglob("*.neff") if p.is_file()]
    except OSError:
        return []

    def mtime(p: Path) -> float:
        try:
            return p.stat().st_mtime
        except OSError:
            return 0.0

    return sorted(found, key=mtime, reverse=True)


def neff_cache_size(cache: Path) -> tuple[int, int]:
    """(files, bytes) of the NEFFs in ``cache``, counting stops just past the caps."""
    files = total = 0
    try:
        for p in cache.rglob("*.neff"):
            files += 1
            try:
                total += p.stat().st_size
            except OSError:
                pass
            if files > MAX_NEFF_COPY_FILES or total > MAX_NEFF_COPY_BYTES:
                break
    except OSError:
        pass
    return files, total


def neffs_written_since(cache: Path, since: float, limit: int = MAX_NEFF_COPY_FILES) -> int:
    """How many NEFFs in the compile cache were written at or after ``since`` (a time.time()),
    counting up to ``limit``: NEFFs compiled while a capture ran."""
    count = 0
    try:
        for p in cache.rglob("*.neff"):
            try:
                if p.stat().st_mtime >= since:
                    count += 1
            except OSError:
                continue
            if count >= limit:
                break
    except OSError:
        pass
    return count


def within_caps(files: int, total: int) -> bool:
    return files <= MAX_NEFF_COPY_FILES and total <= MAX_NEFF_COPY_BYTES


def _link_or_copy(src: Path, dest: Path) -> None:
    try:
        os.link(src, dest)  # same filesystem: no extra space
    except OSError:
        shutil.copy2(src, dest)


def copy_neffs(cache: Path, dest: Path) -> tuple[list[str], str | None]:
    """Copy NEFFs of the compile cache into ``dest``, newest first (the warm-up's come first),
    within the caps. Returns the copied names and, when the caps stopped the copy, a note."""
    copied: list[str] = []
    total = 0
    names: set[str] = set()
    candidates = _neffs_newest_first(cache)
    for src in candidates:
        size = src.stat().st_size
        if len(copied) >= MAX_NEFF_COPY_FILES or total + size > MAX_NEFF_COPY_BYTES:
            return copied, (
                f"copied {len(copied)} of {len(candidates)} NEFFs from {cache}, newest first (cap: "
                f"{MAX_NEFF_COPY_FILES} files, {MAX_NEFF_COPY_BYTES >> 20} MiB); for an exact set, set "
                f"{NEFF_CACHE_ENV} to a fresh directory before the run"
            )
        name = src.name
        if name in names or (dest / name).exists():
            name = f"{src.parent.name}_{src.name}"  # caches keep one model.neff per hash directory
        if name in names or (dest / name).exists():
            continue
        _link_or_copy(src, dest / name)
        names.add(name)
        copied.append(name)
        total += size
    return copied, None


#: The runtime's default ring buffer per NeuronCore (Neuron docs, troubleshooting).
DEFAULT_MAX_EVENTS_PER_NC = 1_000_000
#: System-trace events the runtime records per device execution, at the least: a documented eager
#: forward (ESM-2 650M, neuron-api-2 fact 28) made 58,707 events for 1,050 executions; a
#: compiled one 531 events for one.
EVENTS_PER_EXECUTION = 56


def dropped_events_note(executions: int, limit: int) -> str | None:
    """A note where a capture's device executions (``privateuse1_driver`` events, all cores)
    make at least ``limit`` system-trace events: the runtime keeps at most
    ``max_events_per_nc`` events per NeuronCore, of every kind (submissions, DMA, switches),
    and overwrites the oldest; Neuron Explorer reports the drops only when it processes the
    files. The executions alone would reach the limit only some 56 times too late."""
    events = executions * EVENTS_PER_EXECUTION
    if events < limit:
        return None
    return (
        f"the capture holds {executions:,} Neuron device executions, so about {events:,} or more "
        f"system-trace events (at least {EVENTS_PER_EXECUTION} per execution in the Neuron docs' "
        f"eager run), at or past max_events_per_nc ({limit:,}) if they ran on one NeuronCore: the "
        "runtime may have overwritten the oldest (Neuron Explorer then warns 'trace events were "
        "dropped'); capture fewer steps or raise max_events_per_nc (costs host memory)"
    )


# ---- checks -------------------------------------------------------------------------------


def check_session(files: list[Path], modes: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The signs of a failed capture (docs, troubleshooting): returns (problems, notes)."""
    problems: list[str] = []
    notes: list[str] = []
    runtime_files = [f for f in files if file_kind(f.name) != "framework_trace"]
    if not runtime_files:  # the framework trace alone is torch's, not the runtime's
        problems.append(
            "the Neuron runtime wrote no session files: no op ran on the neuron device inside the "
            "capture, or the runtime trace did not start (NEURON_RT_INSPECT_ENABLE must be UNSET for "
            "torch.profiler capture)"
        )
        return problems, notes
    if not session_dirs(files) and "runtime" in modes:
        problems.append("no runtime trace (ntrace.pb / trace_info.pb) was written")
    ntffs = [f for f in files if f.suffix == ".ntff"]
    empty = [f for f in ntffs if f.stat().st_size == 0]
    if ntffs and len(empty) == len(ntffs):
        problems.append(
            f"all {len(ntffs)} .ntff device traces are empty (0 bytes): nothing warm ran on the "
            "NeuronCores inside the capture; warm up before capturing"
        )
    elif empty:
        notes.append(
            f"{len(empty)} of {len(ntffs)} .ntff device traces are empty: expected for NeuronCores the "
            "process initialised but did not run on (Neuron docs); cores=... or NEURON_RT_NUM_CORES "
            "leaves them out"
        )
    if "device" in modes and not ntffs:
        problems.append("modes includes 'device' but no .ntff device trace was written")
    return problems, notes


def explorer_notes(root: Path, display_name: str) -> tuple[str, list[str]]:
    """The Neuron Explorer command for ``root`` (the docs point ``-d`` at the output root) and
    the lines a user needs to open it, remote hosts included."""
    command = f"neuron-explorer view -d {shlex.quote(str(root))} --ingest-only --display-name {shlex.quote(display_name)}"
    notes = [
        (f"Neuron session files: {command}  (aws-neuronx-tools, in /opt/aws/neuron/bin), then "
        f"`neuron-explorer view` opens the UI on port 3001 with its API on port 3002; from a remote "
        f"host forward both: ssh -L 3001:localhost:3001 -L 3002:localhost:3002 <host>")
    ]
    return command, notes


# ---- a CPU-only capture on a host where TorchNeuron is loaded --------------------------------


def _runtime_default_root() -> Path:
    return Path(os.environ.get(RUNTIME_OUTPUT_ENV) or RUNTIME_DEFAULT_OUTPUT)


class StrayRuntimeOutput:
    """Contains what TorchNeuron's profiler plugin does in a capture that never asked for it.

    ``import torch`` autoloads TorchNeuron, which registers a Kineto plugin. torch's CPU activity
    includes the PrivateUse1 runtime and driver activity types, and Kineto configures every
    registered plugin with them, so a plain CPU capture starts the Neuron runtime trace
    (runtime initialised, NeuronCores claimed) and the runtime writes its session into
    ``./output`` of the working directory. Python cannot unregister the plugin, so this says so
    once per process and moves what this process wrote there into the run directory (or
    removes it when nothing is exported).
    """

    def __init__(self) -> None:
        self.root: Path | None = None
        self.before: set[Path] = set()
        self.root_existed = False

    @staticmethod
    def neuron_loaded() -> bool:
        return "torch_neuronx" in sys.modules

    def warnings(self) -> list[str]:
        if not self.neuron_loaded() or not first_time(("neuron-stray-runtime",)):
            return []
        return [
            ("TorchNeuron is loaded (torch autoloads it), so this CPU capture also starts the Neuron "
            "runtime trace: torch's CPU activity includes the PrivateUse1 runtime/driver types and "
            "Kineto starts every registered plugin. neuronscope moves what the runtime writes into "
            f"{RUNTIME_DEFAULT_OUTPUT} into the run; to avoid it, set TORCH_DEVICE_BACKEND_AUTOLOAD=0 "
            "before importing torch, or use backend='neuron'")
        ]

    def _own(self, root: Path) -> set[Path]:
        pid_dir = f"_pid_{os.getpid()}"
        try:
            return {
                s for d in root.iterdir() if d.is_dir() and d.name.endswith(pid_dir) for s in d.iterdir()
            }
        except OSError:
            return set()

    def snapshot(self) -> None:
        """Before the capture: what this process already has in the runtime's default place."""
        if not self.neuron_loaded():
            self.root = None
            return
        self.root = _runtime_default_root().resolve()
        self.root_existed = self.root.exists()
        self.before = self._own(self.root) if self.root_existed else set()

    def collect(self, dest: Path | None) -> dict[str, Any]:
        """After the capture: move (``dest``) or remove what the runtime wrote; the record."""
        root = self.root
        if root is None or not root.is_dir():
            return {}
        new = sorted(self._own(root) - self.before)
        if not new:
            return {}
        moved: list[str] = []
        for item in new:
            if dest is not None:
                target = dest / item.parent.name / item.name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(item), str(target))
                moved.append(target.relative_to(dest.parent).as_posix())
            else:
                shutil.rmtree(item, ignore_errors=True) if item.is_dir() else item.unlink(missing_ok=True)
        for parent in {item.parent for item in new}:
            try:
                parent.rmdir()  # only when empty
            except OSError:
                pass
        if not self.root_existed:
            try:
                root.rmdir()
            except OSError:
                pass
        where = f"moved into the run ({', '.join(moved)})" if moved else "removed (nothing is exported)"
        return {
            "neuron_runtime_side_effect": {
                "written_to": str(root),
                "sessions": len(new),
                "moved_to": moved,
                "note": (
                    f"TorchNeuron's profiler plugin started the Neuron runtime trace in this CPU "
                    f"capture and wrote {len(new)} session(s) into {root}; {where}"
                ),
            }
        }
