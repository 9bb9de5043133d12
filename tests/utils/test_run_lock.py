"""WorkdirLock: a second holder is refused with one line naming the first; the lock of a
process that died (SIGKILL) is taken over; a clean release leaves nothing behind."""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap

import pytest

from agentic_jax.utils.run_lock import LOCK_FILE, WorkdirBusy, WorkdirLock


def test_a_second_holder_is_refused_naming_the_first(tmp_path):
    with WorkdirLock(str(tmp_path)) as first:
        assert first.taken_over is None
        with pytest.raises(WorkdirBusy) as refused:
            WorkdirLock(str(tmp_path)).acquire()
        message = str(refused.value)
        assert "\n" not in message
        assert message.startswith(f"{tmp_path} is in use by pid {os.getpid()} on host "
                                  f"{socket.gethostname()} since ")
        assert f"({tmp_path / LOCK_FILE}); wait for that run to end" in message
    # Released: the file is gone and the next run takes the directory at once.
    assert not (tmp_path / LOCK_FILE).exists()
    with WorkdirLock(str(tmp_path)) as again:
        assert again.taken_over is None


def test_the_lock_of_a_killed_process_is_taken_over(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from agentic_jax.utils.run_lock import WorkdirLock
            WorkdirLock({str(tmp_path)!r}).acquire()
            print("held", flush=True)
            time.sleep(600)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(WorkdirBusy, match=f"in use by pid {holder.pid} "):
            WorkdirLock(str(tmp_path)).acquire()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    assert (tmp_path / LOCK_FILE).exists()  # a SIGKILL leaves the file, not the lock
    with WorkdirLock(str(tmp_path)) as lock:
        assert lock.taken_over["pid"] == holder.pid
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()


def test_a_record_of_a_dead_pid_without_flock_is_stale(tmp_path, monkeypatch):
    from agentic_jax.utils import run_lock

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    record = {"pid": int(dead.stdout), "host": socket.gethostname(), "started": 0.0,
              "command": "train"}
    (tmp_path / LOCK_FILE).write_text(json.dumps(record))
    monkeypatch.setattr(run_lock, "_flock", lambda fd: None)  # a mount without flock
    with WorkdirLock(str(tmp_path)) as lock:
        assert lock.taken_over == record
        with pytest.raises(WorkdirBusy, match=f"pid {os.getpid()} "):  # alive: refused
            WorkdirLock(str(tmp_path)).acquire()


def test_a_directory_made_for_the_lock_alone_is_removed(tmp_path):
    workdir = tmp_path / "new"
    with WorkdirLock(str(workdir)):
        assert workdir.is_dir()
    assert not workdir.exists()
    with WorkdirLock(str(workdir)):
        (workdir / "metrics.jsonl").write_text("")
    assert os.listdir(workdir) == ["metrics.jsonl"]
