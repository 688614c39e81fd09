"""A job's rank traces read in parallel (local processes, any Executor, a Dask cluster), damaged
ranks named and left out, and the progress bar."""

from __future__ import annotations

import gzip
import json
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import neuronscope.drive.progress as progress_mod
import neuronscope.drive.traces as traces_mod
from neuronscope.drive.traces import RankSummary, from_trace, rank_summary
from neuronscope.errors import TraceFormatError

TRACES = Path(__file__).resolve().parent / "data" / "traces"
SOURCE = TRACES / "training_mm_record_shapes.json.gz"


def _job(directory: Path, ranks: int = 4, slow: int = 2) -> list[Path]:
    """``ranks`` traces of one job, each the real training trace with its rank and world size;
    rank ``slow`` runs three times as long (a straggler)."""
    doc = json.loads(gzip.decompress(SOURCE.read_bytes()))
    directory.mkdir(parents=True, exist_ok=True)
    t0 = min(e["ts"] for e in doc["traceEvents"] if isinstance(e.get("ts"), (int, float)))
    paths = []
    for r in range(ranks):
        d = dict(doc, distributedInfo={"backend": "nccl", "rank": r, "world_size": ranks})
        if r == slow:
            d["traceEvents"] = [
                dict(e, dur=e["dur"] * 3, ts=t0 + (e["ts"] - t0) * 3) if isinstance(e.get("dur"), (int, float)) else e
                for e in doc["traceEvents"]
            ]
        p = directory / f"job_rank{r}.pt.trace.json.gz"
        p.write_bytes(gzip.compress(json.dumps(d).encode()))
        paths.append(p)
    return paths


def _plain(result: Any) -> dict[str, Any]:
    d = result.to_dict()
    d.pop("started_at", None)
    return d


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("job")
    _job(d)
    return d


@pytest.fixture(scope="module")
def serial(job: Path) -> dict[str, Any]:
    return _plain(from_trace(job, executor=False))


def test_ranks_read_in_this_process(job: Path, serial: dict[str, Any]) -> None:
    assert [r["rank"] for r in serial["ranks"]] == [0, 1, 2, 3] and serial["world_size"] == 4
    slow = [h for h in serial["hints"] if h["kind"] == "straggler"]
    assert slow and slow[0]["details"]["rank"] == 2


def test_local_processes_give_the_same_result(job: Path, serial: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # Small files are read in this process by default; with the threshold at 0, by processes.
    monkeypatch.setattr(traces_mod, "PARALLEL_MIN_BYTES", 0)
    assert traces_mod._local_pool(traces_mod.group_by_rank(sorted(job.iterdir()))[1:]) is not None
    assert _plain(from_trace(job)) == serial
    with ProcessPoolExecutor(2) as pool:
        assert _plain(from_trace(job, executor=pool)) == serial
    with ThreadPoolExecutor(2) as pool:  # any Executor; the caller's stays open
        assert _plain(from_trace(job, executor=pool)) == serial
        assert pool.submit(int, "1").result() == 1


def test_rank_summary_is_small_and_names_an_unreadable_rank(job: Path, tmp_path: Path) -> None:
    s = rank_summary(1, [job / "job_rank1.pt.trace.json.gz"], "job")
    assert isinstance(s, RankSummary) and s.rank == 1 and s.world_size == 4 and s.error is None
    assert s.entry is not None and s.entry["rank"] == 1 and s.entry["top_op"]
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X"')
    s = rank_summary(5, [bad], "job")
    assert s.entry is None and s.error is not None and "bad.json" in s.error


@pytest.mark.parametrize("executor", [False, "processes"])
def test_a_damaged_rank_is_named_and_the_rest_read(tmp_path: Path, executor: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(traces_mod, "PARALLEL_MIN_BYTES", 0)
    paths = _job(tmp_path / "job")
    data = paths[3].read_bytes()
    paths[3].write_bytes(data[: len(data) // 2])  # a rank's file cut short (a job killed mid-write)
    res = from_trace(paths, executor=None if executor == "processes" else executor)
    assert [r["rank"] for r in res.ranks] == [0, 1, 2] and res.world_size == 4 and res.rank == 0
    [note] = [n for n in res.notes if "left out" in n]
    assert note.startswith("rank 3 left out:") and "job_rank3" in note and "truncated" in note


def test_a_damaged_main_rank_gives_way_to_the_next(tmp_path: Path) -> None:
    paths = _job(tmp_path / "job", ranks=3)
    paths[0].write_bytes(b'{"traceEvents": [')
    res = from_trace(paths, executor=False)
    assert res.rank == 1 and [r["rank"] for r in res.ranks] == [1, 2]
    assert any(n.startswith("rank 0 left out:") and "job_rank0" in n for n in res.notes)
    for p in paths[1:]:
        p.write_bytes(b"")
    with pytest.raises(TraceFormatError, match="job_rank0"):
        from_trace(paths, executor=False)


@pytest.mark.slow
def test_dask_local_cluster_gives_the_same_result(job: Path, serial: dict[str, Any]) -> None:
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=2, processes=True, dashboard_address=None
    ) as cluster, distributed.Client(cluster) as client:
        assert _plain(from_trace(job, executor=client.get_executor())) == serial


def test_progress_bar_on_stderr_when_asked(job: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tqdm")
    from_trace(job, executor=False)  # stderr is no terminal here: no bar by default
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(progress_mod, "DELAY_S", 0.0)  # a bar at once, not after 2 s
    from_trace(job, executor=False)
    assert capsys.readouterr().err == ""
    from_trace(job, executor=False, progress=True)
    err = capsys.readouterr().err
    assert "4 ranks" in err and "/4 [" in err
    from_trace(SOURCE, progress=True)  # one file: the bytes read
    assert "training_mm_record_shapes" in capsys.readouterr().err


def _read_in_pool_worker(job: str) -> list[int]:
    return [r["rank"] for r in from_trace(job).ranks]


def test_a_pool_worker_reads_the_ranks_itself(job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A daemonic process (a multiprocessing Pool's worker) may start no processes of its own:
    from_trace there reads the ranks one after another rather than fail."""
    import multiprocessing

    monkeypatch.setattr(traces_mod, "PARALLEL_MIN_BYTES", 0)
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply(_read_in_pool_worker, (str(job),)) == [0, 1, 2, 3]
