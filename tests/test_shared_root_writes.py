"""What neuronscope and torch write on a shared output root, and on a full disk (issue 36, item 2).

A group-shared root (setgid, ``umask 002``) once made run directories group-writable, and torch
opens fixed names of its own inside them (``<trace>.tmp``, ``O_TRUNC``, following links): a
teammate's planted link turned a capture into an overwrite of the victim's files. Now the
directories neuronscope makes are writable by their owner only, and torch writes into a private
directory (mode 0700) inside the run, renamed into place from there."""

from __future__ import annotations

import contextlib
import grp
import os
import shutil
import stat
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from neuronscope import doctor, neuron_region
from neuronscope.export import run_dir as export
from neuronscope.export import trace_out
from neuronscope.export.safe_io import WORK_PREFIX
from neuronscope.result.stats import OpStat
from neuronscope.result.types import ProfileResult


def _synthetic(name: str = "victim") -> ProfileResult:
    return ProfileResult(name=name, backend="cpu", wall_time_us=10.0, ops=[OpStat("aten::mul", 1, 3.0, 3.0)])


def _profile() -> torch.profiler.profile:
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    with prof:
        torch.tanh(torch.randn(16, 16))
    return prof


@contextlib.contextmanager
def _umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def test_run_directories_on_a_group_shared_root_are_not_group_writable(tmp_path: Path) -> None:
    root = tmp_path / "team"
    root.mkdir()
    root.chmod(0o2775)  # setgid, group-writable: a team's shared root
    with _umask(0o002), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with neuron_region("grp", backend="cpu", output_dir=str(root)) as r:
            torch.tanh(torch.randn(8, 8))
    assert r.result is not None and r.result.run_dir is not None
    run = Path(r.result.run_dir)
    for d in (run, run.parent):
        mode = d.stat().st_mode
        assert not mode & (stat.S_IWGRP | stat.S_IWOTH), f"{d}: {stat.S_IMODE(mode):o}"
        assert mode & stat.S_ISGID  # the group still comes from the root (readable by the team)
    assert (run / "trace.json").is_file()
    assert not [p for p in run.iterdir() if p.name.startswith(WORK_PREFIX)]


@pytest.mark.parametrize("fmt", ["json", "gz"])
def test_torchs_own_temporary_names_are_never_opened_in_the_run_directory(tmp_path: Path, fmt: str) -> None:
    """Links planted at every name torch or the old code opened: none is followed."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    run = export.new_run_dir(tmp_path / "runs", "planted")
    for name in ("trace.json.tmp", ".trace.json.raw", ".trace.json.raw.tmp", "trace.json.gz.tmp", "trace.json", "trace.json.gz"):
        (run / name).symlink_to(victim)
    writer = trace_out.make_trace_writer(_profile(), fmt, 10)
    out = export.fill_run(run, _synthetic(), summary="s", trace_writer=writer)
    assert victim.read_text() == "precious\n"
    final = run / ("trace.json.gz" if fmt == "gz" else "trace.json")
    assert final.is_file() and not final.is_symlink() and out.artifacts["trace"] == final.name
    assert not [p for p in run.iterdir() if p.name.startswith(WORK_PREFIX)]


def test_a_group_member_cannot_plant_names_in_a_run_directory(tmp_path: Path) -> None:
    """With a real second user in the root's group (where this test runs as root)."""
    if os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("useradd") or not shutil.which("groupadd"):
        pytest.skip("needs root, setpriv, useradd and groupadd to make a teammate")
    subprocess.run(["groupadd", "-f", "nsteam"], capture_output=True, check=False)
    subprocess.run(["useradd", "-M", "-s", "/bin/sh", "-G", "nsteam", "nsmate"], capture_output=True, check=False)
    subprocess.run(["usermod", "-a", "-G", "nsteam", "nsmate"], capture_output=True, check=False)
    try:
        gid = grp.getgrnam("nsteam").gr_gid
        uid = int(subprocess.run(["id", "-u", "nsmate"], capture_output=True, text=True, check=True).stdout)
    except (KeyError, subprocess.CalledProcessError):
        pytest.skip("could not make the teammate user")
    base = Path(tempfile.mkdtemp(prefix="ns-team-"))  # outside pytest's private (0700) tmp
    base.chmod(0o755)
    root = base / "team"
    root.mkdir()
    os.chown(root, 0, gid)
    root.chmod(0o2775)
    with _umask(0o002):
        run = export.new_run_dir(root, "shared")
    plant = ["setpriv", f"--reuid={uid}", f"--regid={gid}", f"--groups={gid}", "--", "/bin/sh", "-c"]
    # The teammate can write the root itself (the group's), but nothing neuronscope made.
    assert subprocess.run([*plant, f"touch {root}/mine"], capture_output=True, check=False).returncode == 0
    try:
        for target in (run, run.parent):
            done = subprocess.run([*plant, f"ln -s /etc/passwd {target}/trace.json.tmp"], capture_output=True, check=False)
            assert done.returncode != 0, f"the teammate planted a link in {target}"
    finally:
        shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def _tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"this sandbox does not allow mount ({done.stderr.strip()})")
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def test_a_full_disk_keeps_result_and_summary_and_releases_the_traces_space(tmp_path: Path) -> None:
    """Room for result.json and summary.txt, not for the trace: both stay (the run marked as
    missing its trace), and the space torch's failed write took comes back (the next small
    capture exports)."""
    with _tmpfs(tmp_path / "small", "512k") as fs:
        (fs / "reserve").write_bytes(b"\0" * 200_000)
        with open(fs / "filler", "wb", buffering=0) as fh, contextlib.suppress(OSError):
            while True:
                fh.write(b"\0" * 4096)
        (fs / "reserve").unlink()
        root = fs / "runs"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with neuron_region("full", backend="cpu", output_dir=str(root), trace_format="json") as r:
                x = torch.randn(8, 8)
                for _ in range(1500):
                    x = torch.tanh(x) * 0.5
            assert r.result is not None and r.result.run_dir is not None, r.result.notes
            run = Path(r.result.run_dir)
            assert (run / "result.json").is_file() and (run / "summary.txt").is_file()
            assert not (run / "trace.json").exists()
            assert any("trace not written" in n and "No space left" in n for n in r.result.notes)
            assert not [p for p in fs.rglob("*") if WORK_PREFIX in p.name or p.name.endswith(".tmp")]
            with neuron_region("small", backend="cpu", output_dir=str(root), trace_format="none") as r2:
                torch.randn(2)
            assert r2.result is not None and r2.result.run_dir is not None, r2.result.notes


def test_doctor_replaces_a_link_planted_at_its_file_name(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "neuronscope-doctor-host.json"
    out.symlink_to(victim)
    assert doctor._write({"kind": "neuronscope-doctor"}, out) == out
    assert victim.read_text() == "precious\n" and not out.is_symlink() and "neuronscope-doctor" in out.read_text()


def test_report_writes_into_the_directory_it_read_not_one_swapped_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    from neuronscope.report import html

    out = export.export_result(_synthetic(), tmp_path / "runs", summary="s")
    run = Path(out.run_dir or "")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    real = html.render_report

    def swap_while_drawing(obj: object) -> str:
        page = real(obj)
        run.rename(tmp_path / "moved")
        run.symlink_to(elsewhere)  # the name now leads somewhere else
        return page

    monkeypatch.setattr(html, "render_report", swap_while_drawing)
    html.write_report(run)
    assert list(elsewhere.iterdir()) == []
    assert (tmp_path / "moved" / "report.html").is_file()
