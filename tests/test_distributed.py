"""Multi-process runs: one timestamp across ranks, the per-rank table on rank 0, stragglers, and
the timeout when a rank is slow or gone.

The end-to-end tests launch REAL ``torchrun`` processes (two ranks, gloo on CPU, an explicit
free port on 127.0.0.1) once for the module: tests/dist_worker.py runs every case in one launch,
because starting two ranks is most of the cost. NCCL and the Neuron backend use the same code
path (the default group's rendezvous store), but no GPU or Trainium was available here, so only
gloo ran. The bookkeeping itself (straggler rule, waiting and giving up, start-time agreement) is
tested in-process with a ``HashStore``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist

import neuronscope.drive.distributed as nd
from neuronscope import load, neuron_region
from neuronscope.analysis.straggler import STRAGGLER_THRESHOLD, straggler_hints
from neuronscope.result.types import ProfileResult

WORKER = Path(__file__).with_name("dist_worker.py")
STAMP = re.compile(r"^(\d{8}-\d{6}-\d{6})_.+_pid\d+_rank(\d+)$")

needs_gloo = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()), reason="torch.distributed with gloo is not available"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Run tests/dist_worker.py under torchrun with two ranks; its records per rank."""
    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("torch.distributed with gloo is not available")
    out = tmp_path_factory.mktemp("torchrun")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("NEURONSCOPE_DISABLE", None)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        f"--master_port={_free_port()}",
        str(WORKER),
        str(out),
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, check=False)
    elapsed = time.perf_counter() - t0
    logs = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"torchrun failed ({proc.returncode}):\n{logs[-4000:]}"
    records = {r: json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)}
    return {"out": out, "records": records, "logs": logs, "elapsed": elapsed}


def _captures(records: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [c for c in records if c["name"] == name]


# ---- end to end: real torchrun ----------------------------------------------------------------
@needs_gloo
def test_every_rank_writes_its_own_run_dir_with_one_shared_timestamp(launched: dict[str, Any]) -> None:
    r0, r1 = launched["records"][0], launched["records"][1]
    assert len(r1) == 9  # warm, step x2, slow x3, skippy x3 (one of four skipped); then rank 1 exits
    r0 = [c for i, c in enumerate(r0) if not (c["name"] == "skippy" and _captures(r0, "skippy").index(c) == 1)]
    for a, b in zip(r0, r1):
        assert a["name"] == b["name"]
        ma, mb = STAMP.match(Path(a["run_dir"]).name), STAMP.match(Path(b["run_dir"]).name)
        assert ma and mb, (a["run_dir"], b["run_dir"])
        assert ma.group(1) == mb.group(1), "the ranks' directories of one capture share the timestamp"
        assert (ma.group(2), mb.group(2)) == ("0", "1")
        assert Path(a["run_dir"]).parent == Path(b["run_dir"]).parent  # one shared root
        assert (a["rank"], a["world_size"], b["rank"], b["world_size"]) == (0, 2, 1, 2)
        assert b["ranks"] is None  # only rank 0 holds the table
    stamps = [STAMP.match(Path(c["run_dir"]).name).group(1) for c in _captures(r0, "slow")]  # type: ignore[union-attr]
    assert stamps == sorted(stamps) and len(set(stamps)) == 3


@needs_gloo
def test_rank0_gathers_each_ranks_row_and_flags_the_straggler(launched: dict[str, Any]) -> None:
    r0, r1 = launched["records"][0], launched["records"][1]
    first = _captures(r0, "step")[0]
    rows = first["ranks"]
    assert [r["rank"] for r in rows] == [0, 1]
    for row in rows:
        assert {"rank", "wall_time_us", "total_op_us", "top_op", "run_dir"} <= set(row)
        assert row["wall_time_us"] > 0 and row["total_op_us"] > 0 and row["top_op"]
    assert rows[1]["run_dir"] == _captures(r1, "step")[0]["run_dir"]
    assert rows[1]["wall_time_us"] == pytest.approx(_captures(r1, "step")[0]["wall_time_us"])
    assert rows[1]["wall_time_us"] >= 300_000  # rank 1 slept 0.3 s inside the capture
    stragglers = [h for h in first["hints"] if h["kind"] == "straggler"]
    assert [h["details"]["rank"] for h in stragglers] == [1]
    d = stragglers[0]["details"]
    assert d["ratio"] > 1 + STRAGGLER_THRESHOLD
    assert d["median_wall_time_us"] < d["wall_time_us"]
    # The other ranks never get the table or straggler hints.
    assert all(c["ranks"] is None and not c["hints"] for c in r1 if c["name"] == "step")


@needs_gloo
def test_show_of_rank0s_run_prints_the_per_rank_table(launched: dict[str, Any]) -> None:
    run = Path(_captures(launched["records"][0], "step")[0]["run_dir"])
    loaded = load(run)
    assert isinstance(loaded, ProfileResult)
    assert (loaded.rank, loaded.world_size) == (0, 2) and loaded.ranks and len(loaded.ranks) == 2
    proc = subprocess.run(
        [sys.executable, "-m", "neuronscope", "show", str(run)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "rank 0/2" in text and "Ranks:" in text
    table = text.split("Ranks:", 1)[1]
    assert re.search(r"^0\s", table, re.MULTILINE) and re.search(r"^1\s", table, re.MULTILINE)
    assert "_rank1" in table  # each rank's run directory, by name
    assert "[straggler:slow_rank]" in text


@needs_gloo
def test_a_slow_rank_costs_rank0_the_timeout_once_then_is_waited_for_again(launched: dict[str, Any]) -> None:
    slow = _captures(launched["records"][0], "slow")
    first = slow[0]
    assert [r["rank"] for r in first["ranks"]] == [0]  # what it has
    assert any("rank 1 did not report within 1 s" in n for n in first["notes"])
    assert 0.95 <= first["gather_seconds"] < 5
    assert [r["rank"] for r in slow[2]["ranks"]] == [0, 1]  # its late record turned up: waited for again
    assert not any("did not report" in n for n in slow[2]["notes"])


@needs_gloo
def test_a_dead_rank_never_hangs_rank0(launched: dict[str, Any]) -> None:
    gone = _captures(launched["records"][0], "gone")
    assert len(gone) == 2
    assert [r["rank"] for r in gone[0]["ranks"]] == [0]
    assert any("rank 1 did not report within 1 s" in n for n in gone[0]["notes"])
    assert 0.95 <= gone[0]["gather_seconds"] < 5
    # Rank 1 never reported for "gone": not waited for again.
    assert gone[1]["gather_seconds"] < 1.0
    assert any("not waited for" in n for n in gone[1]["notes"])


@needs_gloo
def test_only_rank0_prints_its_line(launched: dict[str, Any]) -> None:
    lines = [ln for ln in launched["logs"].splitlines() if ln.startswith("neuronscope: ")]
    assert len(lines) == 12  # rank 0's captures: warm, step x2, slow x3, skippy x4, gone x2
    assert all("_rank0" in ln for ln in lines)


@needs_gloo
def test_a_skipped_capture_costs_no_wait_and_the_next_ones_match_again(launched: dict[str, Any]) -> None:
    """Rank 1 ran the second of four steps uncaptured: the counters used to drift apart for good
    (rank 0 waited the full timeout at every later capture and never got rank 1's rows)."""
    r0, r1 = _captures(launched["records"][0], "skippy"), _captures(launched["records"][1], "skippy")
    assert len(r0) == 4 and len(r1) == 3
    assert [[row["rank"] for row in c["ranks"]] for c in r0] == [[0, 1], [0], [0, 1], [0, 1]]
    assert any("rank 1 did not capture this one" in n for n in r0[1]["notes"]), r0[1]["notes"]
    assert all(c["gather_seconds"] < 5 for c in r0), [c["gather_seconds"] for c in r0]  # the timeout is 20 s
    for a, b in zip([r0[0], r0[2], r0[3]], r1):  # matched by the capture, not by counting
        assert next(row for row in a["ranks"] if row["rank"] == 1)["run_dir"] == b["run_dir"]
        assert STAMP.match(Path(a["run_dir"]).name).group(1) == STAMP.match(Path(b["run_dir"]).name).group(1)  # type: ignore[union-attr]


@needs_gloo
@pytest.mark.slow
def test_a_rank_killed_inside_a_capture_does_not_cost_rank0_its_measurement(tmp_path: Path) -> None:
    """Rank 1 is SIGKILLed inside a capture; torchrun stops rank 0 while it waits for rank 1's
    record. Rank 0's run was exported before the wait: it loads, with its ops."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("NEURONSCOPE_DISABLE", None)
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
        "--master_addr=127.0.0.1", f"--master_port={_free_port()}", str(WORKER), str(tmp_path), "kill",
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode != 0  # a rank died: torchrun says so
    assert not (tmp_path / "rank0-finished").exists(), "rank 0 was not stopped while it waited"
    run = Path((tmp_path / "killed-run").read_text())
    loaded = load(run)
    assert isinstance(loaded, ProfileResult) and loaded.ops and (loaded.rank, loaded.world_size) == (0, 2)


# ---- in process: the bookkeeping -----------------------------------------------------------
def _entry(rank: int, wall_us: float) -> dict[str, Any]:
    return {"rank": rank, "wall_time_us": wall_us, "total_op_us": wall_us / 2, "top_op": "aten::mm", "top_op_us": wall_us / 4, "run_dir": None}


def test_straggler_rule_uses_the_median_and_both_thresholds() -> None:
    hints = straggler_hints([_entry(0, 100_000), _entry(1, 101_000), _entry(2, 130_000)])
    assert [(h.kind, h.pattern, h.details["rank"]) for h in hints] == [("straggler", "slow_rank", 2)]
    assert hints[0].est_saving_us == pytest.approx(29_000)
    # The rank's wall time is no op's: none is said to cost it; the busiest op is a lead.
    assert hints[0].ops == [] and hints[0].time_us == 130_000 and hints[0].confidence == "measured"
    assert "its busiest op is aten::mm (32.50 ms)" in hints[0].suggestion
    assert straggler_hints([_entry(0, 100_000), _entry(1, 110_000)]) == []  # within 20%
    assert straggler_hints([_entry(0, 500), _entry(1, 1_500)]) == []  # under a millisecond over
    assert straggler_hints([_entry(0, 100_000)]) == []


def _dc(rank: int, world: int, name: str, seq: int, store: Any, timeout: float) -> nd.DistCapture:
    return nd.DistCapture(rank=rank, world_size=world, name=name, seq=seq, store=store, timeout_s=timeout)


def _result(wall_us: float = 10_000.0) -> ProfileResult:
    return ProfileResult(name="t", backend="cpu", wall_time_us=wall_us)


def test_gather_records_what_arrived_and_stops_waiting_for_a_rank_that_never_reports() -> None:
    store = dist.HashStore()
    name = "gather-test"
    nd._names.pop(name, None)
    store.set(f"neuronscope/{name}/1/rank1", json.dumps(_entry(1, 11_000)))
    t0 = time.perf_counter()
    res = nd.gather(_dc(0, 3, name, 1, store, 0.3), _result())
    waited = time.perf_counter() - t0
    assert 0.3 <= waited < 2
    assert res.ranks is not None and [r["rank"] for r in res.ranks] == [0, 1]
    assert any("rank 2 did not report within 0.3 s" in n for n in res.notes)

    store.set(f"neuronscope/{name}/2/rank1", json.dumps(_entry(1, 11_000)))
    t0 = time.perf_counter()
    res = nd.gather(_dc(0, 3, name, 2, store, 0.3), _result())
    assert time.perf_counter() - t0 < 0.2  # rank 2 is not waited for again...
    assert [r["rank"] for r in res.ranks or []] == [0, 1]
    assert not store.check([f"neuronscope/{name}/1/rank1"])  # the previous capture's records are deleted

    # ...until it joins a capture again: then it is waited for, and its row comes.
    store.set(f"neuronscope/{name}/3/join2", "1")
    store.set(f"neuronscope/{name}/3/rank1", json.dumps(_entry(1, 11_000)))

    def late() -> None:
        time.sleep(0.1)
        store.set(f"neuronscope/{name}/3/rank2", json.dumps(_entry(2, 12_000)))

    import threading

    t = threading.Thread(target=late)
    t.start()
    res = nd.gather(_dc(0, 3, name, 3, store, 5.0), _result())
    t.join()
    assert [r["rank"] for r in res.ranks or []] == [0, 1, 2] and not res.notes
    nd._names.pop(name, None)


def test_a_skip_record_ends_the_wait_at_once() -> None:
    store = dist.HashStore()
    name = "skip-test"
    nd._names.pop(name, None)
    store.set(f"neuronscope/{name}/1/skip1", "1")
    t0 = time.perf_counter()
    res = nd.gather(_dc(0, 2, name, 1, store, 10.0), _result())
    assert time.perf_counter() - t0 < 1.0
    assert [r["rank"] for r in res.ranks or []] == [0]
    assert any("rank 1 did not capture this one" in n for n in res.notes)
    nd._names.pop(name, None)


def test_other_ranks_publish_without_waiting_and_rank0_adds_straggler_hints() -> None:
    store = dist.HashStore()
    name = "publish-test"
    nd._names.pop(name, None)
    original = _result(wall_us=200_000.0)
    t0 = time.perf_counter()
    slow = nd.gather(_dc(1, 2, name, 1, store, 5.0), original, save=lambda r: dataclasses.replace(r, run_dir="/runs/x_rank1"))
    assert time.perf_counter() - t0 < 0.1
    assert (slow.rank, slow.world_size, slow.ranks) == (1, 2, None)
    assert original.rank is None  # a new result: the one given is not changed
    saved: list[ProfileResult] = []

    def save(r: ProfileResult) -> ProfileResult:
        out = r if r.run_dir else dataclasses.replace(r, run_dir="/runs/x_rank0")
        saved.append(out)
        return out

    fast = nd.gather(_dc(0, 2, name, 1, store, 5.0), _result(wall_us=100_000.0), save=save)
    assert fast.ranks is not None and [r["run_dir"] for r in fast.ranks] == ["/runs/x_rank0", "/runs/x_rank1"]
    assert [h.kind for h in fast.hints] == ["straggler"] and fast.hints[0].details["rank"] == 1
    # Saved first with the measurement alone (before any waiting), then with the table.
    assert [s.ranks is None for s in saved] == [True, False] and saved[1].run_dir == "/runs/x_rank0"
    nd._names.pop(name, None)


def _as_rank(monkeypatch: pytest.MonkeyPatch, rank: int, store: Any) -> None:
    monkeypatch.setattr(nd, "rank_info", lambda: (rank, 2))
    monkeypatch.setattr(nd, "_default_store", lambda: store)


def test_a_rank_uses_its_own_clock_when_rank0_has_no_capture_open(monkeypatch: pytest.MonkeyPatch) -> None:
    store = dist.HashStore()
    name = "stamp-test"
    nd._names.pop(name, None)
    _as_rank(monkeypatch, 1, store)
    monkeypatch.setenv(nd.TIMEOUT_ENV, "0.2")
    t0 = time.perf_counter()
    dc = nd.begin(name)
    assert dc is not None and time.perf_counter() - t0 >= 0.2 and dc.seq is None
    assert dc.started is not None and any("own clock" in n for n in dc.notes)
    t0 = time.perf_counter()
    dc2 = nd.begin(name)  # not waited for again...
    assert dc2 is not None and time.perf_counter() - t0 < 0.15
    stamp = "2026-01-02T03:04:05.000007"
    store.set(f"neuronscope/{name}/open", f"1 {stamp} {time.time()!r}")  # ...until rank 0 opens one
    dc3 = nd.begin(name)
    assert dc3 is not None and dc3.seq == 1 and dc3.started is not None and dc3.started.isoformat() == stamp
    assert not dc3.notes and store.check([f"neuronscope/{name}/1/join1"])
    nd._names.pop(name, None)


def test_a_rank_matches_the_capture_rank0_has_open_not_a_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 0 measured capture 2 alone, long before this rank began: this rank says it skipped
    it and joins capture 3 (counting would have matched it with 2, and every later one off by one)."""
    store = dist.HashStore()
    name = "match-test"
    nd._names.pop(name, None)
    _as_rank(monkeypatch, 1, store)
    monkeypatch.setenv(nd.TIMEOUT_ENV, "5")
    store.set(f"neuronscope/{name}/open", f"1 2026-01-01T00:00:01 {time.time()!r}")
    assert nd.begin(name).seq == 1  # type: ignore[union-attr]
    long_ago = time.time() - 10
    store.set(f"neuronscope/{name}/open", f"2 2026-01-01T00:00:02 {long_ago!r}")
    store.set(f"neuronscope/{name}/stopped", f"2 {long_ago + 1!r}")

    def rank0_opens_3() -> None:
        time.sleep(0.3)
        store.set(f"neuronscope/{name}/open", f"3 2026-01-01T00:00:03 {time.time()!r}")

    import threading

    t = threading.Thread(target=rank0_opens_3)
    t.start()
    dc = nd.begin(name)
    t.join()
    assert dc is not None and dc.seq == 3
    assert store.check([f"neuronscope/{name}/2/skip1"])  # rank 0's gather of 2 stops waiting at once
    # A straggler: capture 4 opened long ago but still open (rank 0 waits for this rank): joined.
    store.set(f"neuronscope/{name}/open", f"4 2026-01-01T00:00:04 {time.time() - 10!r}")
    dc = nd.begin(name)
    assert dc is not None and dc.seq == 4
    nd._names.pop(name, None)


def test_one_process_runs_have_no_rank_fields() -> None:
    assert nd.begin("single") is None
    with neuron_region("single", export=False) as r:
        pass
    assert r.result is not None and (r.result.rank, r.result.world_size, r.result.ranks) == (None, None, None)


def test_timeout_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(nd.TIMEOUT_ENV, "7.5")
    assert nd.gather_timeout_s() == 7.5
    monkeypatch.setenv(nd.TIMEOUT_ENV, "soon")
    assert nd.gather_timeout_s() == nd.DEFAULT_GATHER_TIMEOUT_S
    monkeypatch.delenv(nd.TIMEOUT_ENV)
    assert nd.gather_timeout_s() == nd.DEFAULT_GATHER_TIMEOUT_S
