"""Shared output roots and received run directories: nothing is ever written outside the root (issue 21, items 1-2).

The attacker is a real second Unix user (``nsattacker``, made with ``useradd`` where this test
runs as root), who plants links and directories with shell commands run through ``setpriv``;
the victim is this process. Where no second user can be had, the planted entries are made here
and given to another uid with ``os.chown`` (same checks, no second process), and where neither
works the tests skip, saying why.

Every test ends with :func:`outside_files`: the files the attacker's directories gained. The
tally (``files_outside_root``) must stay 0.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from neuronscope import load, neuron_region
from neuronscope.cli import main as cli_main
from neuronscope.export import run_dir as export
from neuronscope.export import safe_io
from neuronscope.export.safe_io import UnsafePathError
from neuronscope.result.stats import OpStat
from neuronscope.result.types import ProfileResult

ATTACKER = "nsattacker"
#: What the attacks here did, for the reliability report (printed with NEURONSCOPE_TALLY=1).
TALLY = {"attacks": 0, "files_outside_root": 0}


def _can_be_another_user() -> str | None:
    """None when a second user can run commands here, else why not."""
    if os.name != "posix" or os.geteuid() != 0:
        return "not running as root: no second Unix user can be made"
    if not shutil.which("setpriv") or not shutil.which("useradd"):
        return "setpriv or useradd is missing"
    if subprocess.run(["id", ATTACKER], capture_output=True, check=False).returncode != 0:
        made = subprocess.run(["useradd", "-M", "-s", "/bin/sh", ATTACKER], capture_output=True, text=True, check=False)
        if made.returncode != 0 and "exists" not in made.stderr:
            return f"useradd failed: {made.stderr.strip()}"
    return None


class Attacker:
    """Runs shell commands as the second user."""

    def __init__(self) -> None:
        self.uid = int(subprocess.run(["id", "-u", ATTACKER], capture_output=True, text=True, check=True).stdout)
        self.gid = int(subprocess.run(["id", "-g", ATTACKER], capture_output=True, text=True, check=True).stdout)

    def sh(self, script: str) -> None:
        cmd = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--", "/bin/sh", "-c", script]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
        assert done.returncode == 0, done.stderr

    def popen(self, script: str) -> subprocess.Popen[bytes]:
        cmd = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--", "/bin/sh", "-c", script]
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture(scope="module", autouse=True)
def _tally() -> Iterator[None]:
    """Print the tally with NEURONSCOPE_TALLY=1, as tests/test_reliability.py does."""
    yield
    if os.environ.get("NEURONSCOPE_TALLY"):
        import json
        import sys

        sys.__stdout__.write(f"\nshared-root tally: {json.dumps(TALLY)}\n")


@pytest.fixture
def attacker() -> Attacker:
    why = _can_be_another_user()
    if why is not None:
        pytest.skip(why)
    return Attacker()


def _dirs(attacker: Attacker, prefix: str, root_mode: int) -> tuple[Path, Path, Path]:
    """(a base outside pytest's private tmp (mode 0700), a root of ``root_mode`` in it, and the
    attacker's own directory, holding files of a third party that an attack would overwrite)."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    base.chmod(0o755)
    root, loot = base / "shared", base / "attacker-home"
    root.mkdir()
    root.chmod(root_mode)
    loot.mkdir()
    (loot / "result.json").write_text("precious\n")
    (loot / "summary.txt").write_text("precious\n")
    loot.chmod(0o777)
    os.chown(loot, attacker.uid, attacker.gid)
    return base, root, loot


@pytest.fixture
def shared(attacker: Attacker) -> Iterator[tuple[Path, Path]]:
    """(a shared root, mode 1777 as /tmp; the attacker's directory)."""
    base, root, loot = _dirs(attacker, "ns-shared-", 0o1777)
    yield root, loot
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def open_root(attacker: Attacker) -> Iterator[tuple[Path, Path]]:
    """(a root writable by all without the sticky bit, so the attacker can rename entries in
    it; the attacker's directory)."""
    base, root, loot = _dirs(attacker, "ns-open-", 0o777)
    yield root, loot
    shutil.rmtree(base, ignore_errors=True)


def outside_files(loot: Path) -> list[str]:
    """Files in the attacker's directory that are not the two it started with, or changed."""
    found = []
    for p in sorted(loot.rglob("*")):
        rel = str(p.relative_to(loot))
        if p.is_file() and not p.is_symlink():
            if rel in ("result.json", "summary.txt"):
                if p.read_text() != "precious\n":
                    found.append(rel + " (overwritten)")
            else:
                found.append(rel)
    TALLY["files_outside_root"] += len(found)
    return found


def _work() -> torch.Tensor:
    x = torch.randn(8, 8)
    for _ in range(5):
        x = torch.tanh(x) * 0.5
    return x


def _synthetic(name: str = "victim") -> ProfileResult:
    return ProfileResult(name=name, backend="cpu", wall_time_us=10.0, ops=[OpStat("aten::mul", 1, 3.0, 3.0)])


# ---- planted before the capture --------------------------------------------------------------


def test_planted_symlink_for_the_name_is_refused(shared: tuple[Path, Path], attacker: Attacker) -> None:
    root, loot = shared
    attacker.sh(f"ln -s {loot} {root}/victim")
    TALLY["attacks"] += 1
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with neuron_region("victim", backend="cpu", output_dir=str(root)) as r:
            _work()
    assert r.result is not None and r.result.run_dir is None and r.result.ops  # kept in memory
    assert any("symbolic link" in str(w.message) for w in record), [str(w.message) for w in record]
    assert outside_files(loot) == []
    with pytest.raises(UnsafePathError, match="symbolic link"):
        export.export_result(_synthetic(), root, summary="s")
    assert outside_files(loot) == []


def test_planted_directory_of_another_user_is_refused(shared: tuple[Path, Path], attacker: Attacker) -> None:
    root, _ = shared
    attacker.sh(f"mkdir -m 777 {root}/victim")
    TALLY["attacks"] += 1
    with pytest.raises(UnsafePathError, match="another user"):
        export.export_result(_synthetic(), root, summary="s")
    assert list((root / "victim").iterdir()) == []


def test_symlink_of_another_user_above_the_root_is_refused(shared: tuple[Path, Path], attacker: Attacker) -> None:
    root, loot = shared
    attacker.sh(f"ln -s {loot} {root}/runs")  # the user asked for <shared>/runs as the root
    TALLY["attacks"] += 1
    with pytest.raises(UnsafePathError, match="owned by another user"):
        export.export_result(_synthetic(), root / "runs", summary="s")
    assert outside_files(loot) == []


def test_a_symlink_of_our_own_above_the_root_is_followed(tmp_path: Path) -> None:
    """The root's path is the user's choice: a link they made there (macOS's /tmp) works."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    out = export.export_result(_synthetic(), tmp_path / "link", summary="s")
    assert out.run_dir is not None and (real / "victim").is_dir()
    assert load(out.run_dir).ops


# ---- swapped while the captured block runs ----------------------------------------------------


def test_run_directory_swapped_for_a_symlink_during_the_capture(open_root: tuple[Path, Path], attacker: Attacker) -> None:
    """In the middle of the captured block the attacker moves the capture's directory away and
    puts a link to its own directory in its place (run directories of the same names inside)."""
    root, loot = open_root
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with neuron_region("swapped", backend="cpu", output_dir=str(root)) as r:
            _work()
            made = sorted(p.name for p in (root / "swapped").iterdir()) if (root / "swapped").is_dir() else []
            runs = " ".join(made)
            # Each run name as a link back to the attacker's directory: a followed write lands there.
            attacker.sh(
                f"mv {root}/swapped {root}/moved-away 2>/dev/null; mkdir -p {loot}/swapped; "
                f"for r in {runs}; do ln -s {loot} {loot}/swapped/$r; done; ln -s {loot}/swapped {root}/swapped"
            )
            TALLY["attacks"] += 1
    assert r.result is not None and r.result.ops  # the measurement is never lost
    if r.result.run_dir is not None:  # made after the capture (the new flow): a fresh, checked directory
        assert not Path(r.result.run_dir).resolve().is_relative_to(loot)
    else:
        assert any("symbolic link" in str(w.message) for w in record)
    assert outside_files(loot) == []


def test_a_racing_attacker_never_gets_a_file(open_root: tuple[Path, Path], attacker: Attacker) -> None:
    """A second user swapping the name's directory for a link, in a loop, while captures export:
    files created in its directory: 0."""
    root, loot = open_root
    racer = attacker.popen(
        f"i=0; while :; do i=$((i+1)); mv {root}/race {root}/gone$i 2>/dev/null && ln -s {loot} {root}/race; done"
    )
    try:
        for _ in range(12):
            with warnings.catch_warnings(record=True) as record:
                warnings.simplefilter("always")
                with neuron_region("race", backend="cpu", output_dir=str(root)) as r:
                    _work()
            TALLY["attacks"] += 1
            assert r.result is not None and r.result.ops
            # A capture whose export met the attacker keeps its result in memory and says why.
            if r.result.run_dir is None:
                said = [str(w.message) for w in record] + r.result.notes
                assert any("could not export" in m or m.startswith("not exported: ") for m in said), said
            time.sleep(0.01)
    finally:
        racer.kill()
        racer.wait(timeout=10)
    assert outside_files(loot) == []


def test_export_result_holds_the_directory_it_checked(tmp_path: Path) -> None:
    """The trace writer runs while another thread renames the run directory away and plants a
    link: the trace still lands in the checked directory (written through its descriptor)."""
    root = tmp_path / "root"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    swapped: list[Path] = []

    def writer(run_dir: Path) -> Path:
        real = Path(os.path.realpath(run_dir))
        moved = real.with_name("moved")
        real.rename(moved)
        real.symlink_to(elsewhere)  # the old name now points elsewhere
        swapped.append(moved)
        path = run_dir / "trace.json"
        export.atomic_write_with(path, lambda tmp: tmp.write_text("{}"))
        return path

    out = export.export_result(_synthetic(), root, summary="s", trace_writer=writer)
    assert list(elsewhere.iterdir()) == []
    assert sorted(p.name for p in swapped[0].iterdir()) == ["result.json", "summary.txt", "trace.json"]
    assert out.artifacts["trace"] == "trace.json"


def test_chowned_plants_are_refused_without_a_second_process(tmp_path: Path) -> None:
    """The same checks with entries given to another uid by ``os.chown`` (root only)."""
    if os.geteuid() != 0:
        pytest.skip("os.chown to another uid needs root")
    root = tmp_path / "root"
    root.mkdir()
    (root / "victim").symlink_to(tmp_path)
    with pytest.raises(UnsafePathError):
        export.export_result(_synthetic(), root, summary="s")
    (root / "victim").unlink()
    (root / "victim").mkdir()
    os.chown(root / "victim", 4242, 4242)
    with pytest.raises(UnsafePathError, match="uid 4242"):
        export.export_result(_synthetic(), root, summary="s")
    os.chown(root / "victim", 0, 0)
    (root / "victim").chmod(0o777)
    with pytest.raises(UnsafePathError, match="writable by every user"):
        export.export_result(_synthetic(), root, summary="s")


def test_directories_made_are_never_world_writable(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        out = export.export_result(_synthetic(), tmp_path / "new-root", summary="s")
    finally:
        os.umask(old)
    assert out.run_dir is not None
    for d in (Path(out.run_dir), Path(out.run_dir).parent, tmp_path / "new-root"):
        assert not stat.S_IMODE(d.stat().st_mode) & stat.S_IWOTH, d


# ---- a run directory received from someone else ------------------------------------------------


def test_report_does_not_follow_planted_temporary_links(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = export.export_result(_synthetic(), tmp_path / "runs", summary="s")
    run = Path(out.run_dir or "")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    for pid in range(os.getpid() - 50, os.getpid() + 50):  # every guess of the old fixed name
        (run / f".report.html.tmp{pid}").symlink_to(victim)
    (run / "report.html").symlink_to(victim)  # and the report itself
    TALLY["attacks"] += 1
    assert cli_main(["report", str(run)]) == 0
    assert victim.read_text() == "precious\n"
    assert (run / "report.html").is_file() and not (run / "report.html").is_symlink()
    assert "<!DOCTYPE html>" in (run / "report.html").read_text()


def test_temporary_files_are_exclusive_everywhere(tmp_path: Path) -> None:
    """atomic_write_text into a directory full of planted links to a victim file."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    target = tmp_path / "dir"
    target.mkdir()
    for pid in range(os.getpid() - 5, os.getpid() + 5):
        (target / f".out.txt.tmp{pid}").symlink_to(victim)
    safe_io.atomic_write_text(target / "out.txt", "new\n")
    assert victim.read_text() == "precious\n" and (target / "out.txt").read_text() == "new\n"
    assert threading.active_count() >= 1
