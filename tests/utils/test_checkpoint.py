"""Checkpointer: round trip, keep-N, corrupted newest falls back (and with set_aside is moved
out), a killed save loses nothing, a failed save is one line and keeps the previous one."""

import contextlib
import logging
import os
import resource
import signal
import subprocess
import sys
import textwrap
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentic_jax.utils import Checkpointer
from agentic_jax.utils.checkpoint import CheckpointSaveError, NoRestorableCheckpoint


def _state(seed: int):
    k = jax.random.key(seed)
    return {
        "params": {"w": jax.random.normal(k, (8, 4)), "b": jnp.arange(4.0)},
        "step": jnp.asarray(seed, jnp.int32),
    }


def test_round_trip_with_meta(tmp_path):
    with Checkpointer(str(tmp_path / "ckpt"), every_steps=2, keep=2) as ck:
        assert not ck.maybe_save(1, _state(1), {"pos": 1})
        assert ck.maybe_save(2, _state(2), {"pos": 2, "sched": {"stage": "algebra"}})
        ck.wait()
        restored = ck.restore_latest(_state(0))
    assert restored.step == 2
    assert restored.meta == {"pos": 2, "sched": {"stage": "algebra"}}
    np.testing.assert_array_equal(restored.state["params"]["w"], _state(2)["params"]["w"])
    assert int(restored.state["step"]) == 2


def test_keeps_newest_k(tmp_path):
    with Checkpointer(str(tmp_path), every_steps=1, keep=2) as ck:
        for s in range(1, 5):
            ck.maybe_save(s, _state(s), {"pos": s})
        ck.wait()
        assert ck.all_steps() == [3, 4]


def test_empty_directory_restores_none(tmp_path):
    with Checkpointer(str(tmp_path), every_steps=1, keep=2) as ck:
        assert ck.restore_latest(_state(0)) is None


def test_corrupted_newest_falls_back(tmp_path, caplog):
    with Checkpointer(str(tmp_path), every_steps=1, keep=3) as ck:
        ck.maybe_save(1, _state(1), {"pos": 1})
        ck.maybe_save(2, _state(2), {"pos": 2})
        ck.wait()
    # Damage every file of the newest step's state item.
    for root, _, files in os.walk(tmp_path / "2" / "state"):
        for name in files:
            with open(os.path.join(root, name), "wb") as f:
                f.write(b"\x00garbage")
    with Checkpointer(str(tmp_path), every_steps=1, keep=3) as ck:
        restored = ck.restore_latest(_state(0))
    assert restored.step == 1
    assert restored.meta == {"pos": 1}
    assert any("step 2" in r.getMessage() for r in caplog.records)


def _corrupt(step_dir):
    for root, _, files in os.walk(step_dir / "state"):
        for name in files:
            with open(os.path.join(root, name), "wb") as f:
                f.write(b"\x00garbage")


def test_set_aside_moves_corrupt_checkpoints_out(tmp_path):
    directory = tmp_path / "checkpoints"
    with Checkpointer(str(directory), every_steps=1, keep=3, async_save=False) as ck:
        for step in (1, 2, 3):
            ck.maybe_save(step, _state(step), {"pos": step})
    _corrupt(directory / "2")
    _corrupt(directory / "3")
    with Checkpointer(str(directory), every_steps=1, keep=3) as ck:
        restored = ck.restore_latest(_state(0), set_aside=True)
        assert restored.step == 1 and ck.all_steps() == [1]
    assert sorted(os.listdir(tmp_path / "checkpoints.corrupt")) == ["2", "3"]
    # Every checkpoint failing is no proof of corruption (another model, say): nothing moves.
    _corrupt(directory / "1")
    with Checkpointer(str(directory), every_steps=1, keep=3) as ck:
        with pytest.raises(NoRestorableCheckpoint, match=r"none of its 1 checkpoints restores "
                                                         r"\(step 1: "):
            ck.restore_latest(_state(0), set_aside=True)
        assert ck.restore_latest(_state(0)) is None
    assert os.listdir(directory) == ["1"]


@contextlib.contextmanager
def _file_size_limit(nbytes):
    """Writes past ``nbytes`` fail (EFBIG) in this process, as on a full disk."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


@pytest.mark.parametrize("async_save", [False, True])
def test_a_failed_save_is_one_line_and_keeps_the_previous_checkpoint(tmp_path, caplog,
                                                                      async_save):
    big = {"w": jax.random.normal(jax.random.key(0), (256, 1024))}  # 1 MB, incompressible
    with Checkpointer(str(tmp_path), every_steps=1, keep=1, async_save=async_save) as ck:
        ck.maybe_save(1, big, {"pos": 1})
        ck.wait()
        caplog.clear()
        with _file_size_limit(100_000), pytest.raises(CheckpointSaveError) as failed:
            ck.maybe_save(2, big, {"pos": 2})
            ck.wait()  # a background save fails here at the latest
    message = str(failed.value)
    assert message == (f"saving the checkpoint of step 2 in {tmp_path} failed: OUT_OF_RANGE: "
                       "File too large (errno 27) (step 1's checkpoint is intact)")
    assert not any(r.exc_info for r in caplog.records)  # orbax's tracebacks are not logged
    assert os.listdir(tmp_path) == ["1"]  # no temporary directory left; keep=1 kept step 1
    with Checkpointer(str(tmp_path), every_steps=1, keep=1) as ck:
        restored = ck.restore_latest({"w": jnp.zeros((256, 1024))})
    assert restored.step == 1
    np.testing.assert_array_equal(restored.state["w"], big["w"])


@pytest.mark.parametrize("async_save", [False, True])
def test_a_failed_saves_late_writers_leave_nothing_after_close(tmp_path, async_save):
    """A failed save's other writers may go on after its error was raised and leave the
    temporary directory again (seen under load: '4.orbax-checkpoint-tmp' beside '2'); closing
    the checkpointer, once they are done, removes it."""
    big = {"w": jax.random.normal(jax.random.key(0), (256, 1024))}
    ck = Checkpointer(str(tmp_path), every_steps=1, keep=1, async_save=async_save)
    ck.maybe_save(1, big, {"pos": 1})
    ck.wait()
    with _file_size_limit(100_000), pytest.raises(CheckpointSaveError):
        ck.maybe_save(2, big, {"pos": 2})
        ck.wait()
    def leave(name):                                          # what a late writer leaves
        late = tmp_path / name / "state"
        late.mkdir(parents=True)
        (late / "part").write_bytes(b"x")

    leave("2.orbax-checkpoint-tmp-9")                         # before the close
    writer = threading.Timer(0.2, leave, ("2.orbax-checkpoint-tmp",))  # and during it
    writer.start()
    ck.close()
    writer.join()
    assert os.listdir(tmp_path) == ["1"]


def test_process_killed_during_save_keeps_previous(tmp_path):
    script = textwrap.dedent(f"""
      import jax, jax.numpy as jnp, sys, time
      from agentic_jax.utils import Checkpointer
      ck = Checkpointer({str(tmp_path)!r}, every_steps=1, keep=3)
      ck.maybe_save(1, {{"w": jnp.ones((4,))}}, {{"pos": 1}})
      ck.wait()
      print("saved", flush=True)
      big = {{"w": jnp.ones((64, 1024, 1024))}}
      ck.maybe_save(2, big, {{"pos": 2}})
      print("saving", flush=True)
      time.sleep(60)
  """)
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    try:
        lines = []
        deadline = time.time() + 120
        while time.time() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "saving" in line:
                break
        assert any("saving" in l for l in lines), lines
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    with Checkpointer(str(tmp_path), every_steps=1, keep=3) as ck:
        restored = ck.restore_latest({"w": jnp.zeros((4,))})
    assert restored is not None
    # The interrupted step never became a checkpoint that restores; step 1 is intact.
    assert restored.step == 1
    np.testing.assert_array_equal(restored.state["w"], np.ones(4))


def test_bad_options(tmp_path):
    with pytest.raises(ValueError, match="checkpoint.every_steps"):
        Checkpointer(str(tmp_path), every_steps=0)
    with pytest.raises(ValueError, match="checkpoint.keep"):
        Checkpointer(str(tmp_path), keep=0)


def test_cause_names_the_reason_in_one_line():
    from agentic_jax.utils.checkpoint import cause

    # tensorstore's error of a save to a full disk (tmpfs), as orbax raises it.
    full = ValueError(
        'RESOURCE_EXHAUSTED: Error writing "w/0.0" in OCDBT database at local file "/r/c/1.orbax'
        '-checkpoint-tmp/state.orbax-checkpoint-tmp/ocdbt.process_0/": Failed writing: "/r/c/1.'
        'orbax-checkpoint-tmp/state.orbax-checkpoint-tmp/ocdbt.process_0/d/04e97ae5": Failed to '
        "write 727670 bytes to file 7: No space left on device [os_error_code='28']")
    assert cause(full) == "RESOURCE_EXHAUSTED: No space left on device (errno 28)"
    # The file-size limit, where the text before the error number is a JSON spec's tail.
    too_large = ValueError(
        'OUT_OF_RANGE: Error writing "w/0.0": Failed writing: {"driver": "file", "path": '
        "\"/r/c/d/0a\", \"recheck_cached_data\": true}'] [os_error_code='27']")
    assert cause(too_large) == "OUT_OF_RANGE: File too large (errno 27)"
    assert cause(OSError(122, "Disk quota exceeded")) == "Disk quota exceeded (errno 122)"
    assert cause(RuntimeError("first\nsecond")) == "first"
    assert cause(KeyError()) == "KeyError"
    assert len(cause(ValueError("x" * 1000))) == 300
