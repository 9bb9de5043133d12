"""Checkpointer: round trip, keep-N, corrupted newest falls back, a killed save loses nothing."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentic_jax.utils import Checkpointer


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
