"""capture/stderr.py: torch's native lines around a profiler start or stop are dropped from fd 2,
and nothing else the user's program writes to stderr is lost, whatever else happens meanwhile
(other threads, interrupts, a closed or odd stderr).

Each case runs in a fresh process whose real fd 2 is read: the filter changes fd 2 process-wide.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

_PRELUDE = """
import os, sys, threading, time
from neuronscope.capture.stderr import quiet_native_stderr
"""


def _run(body: str, **env_vars: str) -> subprocess.CompletedProcess[str]:
    """``body`` in a fresh process (it must exit 0 within a minute), with ``env_vars`` set: its
    stdout and stderr."""
    code = textwrap.dedent(_PRELUDE) + textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": str(ROOT), **env_vars}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, f"rc={run.returncode}\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
    return run


def test_marked_lines_are_dropped_and_the_rest_written_back_in_order() -> None:
    run = _run(
        """
        with quiet_native_stderr():
            os.write(2, b"one\\nUSDT: probe profiler_start\\n")
            with quiet_native_stderr((b"NOTE",)):  # nested on one thread: one redirect in another
                os.write(2, b"two\\nNOTE inner\\n")
            print("three", file=sys.stderr)
            os.write(2, b"no newline")
        os.write(2, b"|after\\n")
        """
    )
    assert run.stderr == "one\ntwo\nthree\nno newline|after\n"


def test_two_threads_filtering_at_once_leave_stderr_working() -> None:
    # fd 2 is the process's: B's filter, begun inside A's, saved A's scratch file as "stderr"
    # and put fd 2 back on it after A ended: what B wrote, and all stderr after, was lost.
    run = _run(
        """
        a_in, a_out = threading.Event(), threading.Event()
        def a():
            with quiet_native_stderr():
                a_in.set(); time.sleep(0.3)
            a_out.set()
        def b():
            a_in.wait(30)
            with quiet_native_stderr():
                os.write(2, b"B-INSIDE\\n")
                a_out.wait(30)
        threads = [threading.Thread(target=a), threading.Thread(target=b)]
        [t.start() for t in threads]; [t.join() for t in threads]
        os.write(2, b"AFTER-MARK\\n")
        """
    )
    assert "B-INSIDE" in run.stderr and "AFTER-MARK" in run.stderr


def test_an_interrupt_at_any_moment_never_leaves_stderr_redirected() -> None:
    # An exception from a signal handler (a Ctrl-C, a user's SIGALRM timeout) landing between
    # the redirect and its undo left fd 2 on a deleted scratch file for ever: 11 in 5,000
    # random moments before the undo came first in the finally and the redirect inside the try.
    run = _run(
        """
        import gc, random, signal
        class Stop(Exception):
            pass
        def stop(*_):
            raise Stop
        signal.signal(signal.SIGALRM, stop)
        mine, stuck, random_moments = os.fstat(2).st_ino, 0, random.Random(1)
        keep = os.dup(2)
        for _ in range(3000):
            try:
                signal.setitimer(signal.ITIMER_REAL, random_moments.uniform(0.000005, 0.0003))
                with quiet_native_stderr():
                    pass
                time.sleep(0.0004)
            except Stop:
                pass
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            if os.fstat(2).st_ino != mine:
                gc.collect()  # an interrupted exit's generator is closed (and fd 2 put back) here
            if os.fstat(2).st_ino != mine:
                stuck += 1; os.dup2(keep, 2)
        print("stuck", stuck)
        """
    )
    assert "stuck 0" in run.stdout


def test_an_odd_or_closed_stderr_never_fails_the_moment() -> None:
    # A sys.stderr whose flush raises (the user's own object) failed the profiler's start;
    # stderr a closed pipe failed its stop (BrokenPipeError writing a line back); fd 2 closed
    # runs unfiltered.
    run = _run(
        """
        class Odd:
            def write(self, s): return len(s)
            def flush(self): raise RuntimeError("the user's stderr object")
        sys.stderr = Odd()
        with quiet_native_stderr():
            os.write(2, b"ODD-KEPT\\n")
        sys.stderr = sys.__stderr__
        keep = os.dup(2)
        r, w = os.pipe(); os.dup2(w, 2); os.close(w); os.close(r)
        with quiet_native_stderr():
            os.write(2, b"to a reader that is gone\\n")
        os.close(2)
        with quiet_native_stderr():
            pass
        os.dup2(keep, 2)
        os.write(2, b"AFTER-MARK\\n")
        print("done")
        """
    )
    assert "done" in run.stdout and run.stderr == "ODD-KEPT\nAFTER-MARK\n"


def test_a_full_temporary_directory_loses_no_line(tmp_path: Path) -> None:
    """The temporary directory on a filesystem with 16 KiB (a full disk, really): lines written
    during the moment, 100 KiB of them, all reach stderr, and the user's own write to fd 2 does
    not fail with ENOSPC (it did, after 335 lines, with the scratch file there)."""
    full = tmp_path / "full"
    full.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(full)], capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip("needs a small tmpfs to fill (mount, as root)")
    try:
        run = _run(
            """
            with quiet_native_stderr():
                for i in range(2000):
                    os.write(2, b"USER LINE %05d during the moment..............................\\n" % i)
            print("wrote")
            """,
            TMPDIR=str(full),
        )
    finally:
        subprocess.run(["umount", str(full)], capture_output=True, check=False)
    assert "wrote" in run.stdout and run.stderr.count("USER LINE") == 2000, run.stderr[-500:]
