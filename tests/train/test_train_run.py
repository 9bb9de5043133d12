"""The training run end to end on a tiny config: metrics, checkpoints, exact resume, fallback
past a corrupted checkpoint, and divergence handling; and the faults a run must survive: a cut
metrics line, a second run on the directory, SIGTERM, a save that fails."""

import json
import os
import resource
import shutil
import signal
import time

import pytest

from agentic_jax.training import run as run_lib
from agentic_jax.rl import state as state_lib
from agentic_jax.training.builders import build_run
from agentic_jax.config import read_config
from agentic_jax.training.preemption import RunStopped
from agentic_jax.training.update import TrainingDiverged
from agentic_jax.utils import Checkpointer
from agentic_jax.utils import read_metrics
from agentic_jax.utils.checkpoint import CheckpointSaveError
from agentic_jax.utils.run_lock import WorkdirBusy, WorkdirLock
from train_testing import comparable, tiny_config, train

REQUIRED = ("step", "reward", "accuracy", "code_use_rate", "exec_success_rate", "tool_calls",
            "response_length", "kl", "entropy", "tokens_per_sec")


def _records(workdir):
    records, skipped = read_metrics(os.path.join(workdir, "metrics.jsonl"))
    assert skipped == 0
    return records


@pytest.fixture(scope="module")
def engine_asleep_in_update() -> list[bool]:
    """Whether the rollout engine had let go of its KV pool and weights, for each update of
    `full_run`."""
    return []


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, engine_asleep_in_update):
    workdir = str(tmp_path_factory.mktemp("full"))
    real = run_lib.update

    def watched(run, *args, **kwargs):
        engine = run.policy.engine
        engine_asleep_in_update.append(engine.asleep and engine.kv is None)
        return real(run, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_lib, "update", watched)
        summary = train(tiny_config(), workdir, progress=False)
    return workdir, summary


def test_the_engine_sleeps_through_every_update(full_run, engine_asleep_in_update):
    # The synchronous loop frees the engine's pool for the update and publish wakes it: the
    # held-out evaluation after the last step sampled with it.
    _, summary = full_run
    assert engine_asleep_in_update == [True] * 4
    assert summary["final"]["tools"]["num_episodes"] > 0


def test_run_writes_metrics_checkpoints_and_summary(full_run):
    workdir, summary = full_run
    records = _records(workdir)
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    for r in records:
        assert all(k in r for k in REQUIRED), sorted(set(REQUIRED) - set(r))
        assert 0.0 <= r["accuracy"] <= 1.0 and 0.0 <= r["code_use_rate"] <= 1.0
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints")))[-1] == "4"
    assert os.listdir(os.path.join(workdir, "tensorboard"))
    with open(os.path.join(workdir, "config.json")) as f:
        assert json.load(f)["num_params"] > 0
    with open(os.path.join(workdir, "summary.json")) as f:
        on_disk = json.load(f)
    assert on_disk["steps"] == summary["steps"] == 4
    for phase in ("initial", "final"):
        for mode in ("tools", "direct"):
            assert 0.0 <= summary[phase][mode]["accuracy"] <= 1.0
    assert summary["final"]["direct"]["code_use_rate"] == 0.0  # tools forbidden
    assert summary["wall_time_s"] > 0
    assert summary["peak_rss_mb"] > 100  # a JAX process: far above any unit mix-up


def test_restart_resumes_exactly_past_a_cut_metrics_line(full_run, tmp_path):
    workdir, _ = full_run
    split = str(tmp_path / "split")
    train(tiny_config(**{"training.total_steps": 2}), split, progress=False)
    with open(os.path.join(split, "metrics.jsonl"), "a") as f:
        f.write('{"step": 3, "reward": 0.')  # what a crash while step 3 was logged leaves
    train(tiny_config(), split, progress=False)
    one = [comparable(r) for r in _records(workdir)]
    two = [comparable(r) for r in _records(split)]
    assert [r["step"] for r in two] == [1, 2, 3, 4]
    assert one == two


def test_corrupted_newest_checkpoint_falls_back(full_run, tmp_path, caplog):
    workdir, _ = full_run
    copy = str(tmp_path / "copy")
    shutil.copytree(workdir, copy)
    for root, _, files in os.walk(os.path.join(copy, "checkpoints", "4")):
        for name in files:
            with open(os.path.join(root, name), "wb") as f:
                f.write(b"\0corrupt")
    assert _restored_step(tiny_config(), copy) == 2
    assert any("step 4" in r.getMessage() for r in caplog.records)
    # Moved aside: no later resume or cleanup takes it for a checkpoint.
    assert os.listdir(os.path.join(copy, "checkpoints.corrupt")) == ["4"]
    assert "4" not in os.listdir(os.path.join(copy, "checkpoints"))


def test_a_second_run_on_the_directory_is_refused_before_it_builds(tmp_path):
    with WorkdirLock(str(tmp_path)):
        start = time.monotonic()
        with pytest.raises(WorkdirBusy, match=f"in use by pid {os.getpid()} on host"):
            train(tiny_config(), str(tmp_path), progress=False)
        assert time.monotonic() - start < 5
    assert os.listdir(tmp_path) == []


def test_sigterm_saves_the_step_in_flight_and_resumes_exactly(full_run, tmp_path,
                                                              monkeypatch):
    workdir, _ = full_run
    stopped_dir = str(tmp_path / "term")
    real, sent = run_lib.update, []

    def terminated_in_step_3(run, state, episodes, step, **kwargs):
        if step == 3:  # a scheduler's preemption, in the middle of the step
            sent.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGTERM)
        return real(run, state, episodes, step, **kwargs)

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(run_lib, "update", terminated_in_step_3)
    with pytest.raises(RunStopped) as stopped:
        train(tiny_config(), stopped_dir, progress=False)
    exit_s = time.monotonic() - sent[0]
    assert stopped.value.code == 128 + signal.SIGTERM == 143
    assert signal.getsignal(signal.SIGTERM) == before
    # Step 3 finished and was saved, though checkpoints come every 2 steps; within the bound
    # of the rest of one step and one save (a tiny step takes about a second here).
    assert sorted(os.listdir(os.path.join(stopped_dir, "checkpoints"))) == ["0", "2", "3"]
    assert [r["step"] for r in _records(stopped_dir)] == [1, 2, 3]
    assert exit_s < 30, exit_s
    assert not os.path.exists(os.path.join(stopped_dir, "run.lock"))
    monkeypatch.setattr(run_lib, "update", real)
    train(tiny_config(), stopped_dir, progress=False)
    assert [comparable(r) for r in _records(stopped_dir)] == [
        comparable(r) for r in _records(workdir)]


def test_a_failed_save_stops_the_run_and_keeps_the_last_checkpoint(tmp_path, monkeypatch):
    workdir = str(tmp_path / "full_disk")
    cfg = tiny_config(**{"training.total_steps": 6, "checkpoint.keep": 1})
    real = run_lib.update
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    sigxfsz = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    def disk_full_from_step_4(run, state, episodes, step, **kwargs):
        # Files grow no further than 64 KiB from step 4: the run's logs (under 16 KiB) do, no
        # checkpoint data file does. The embedding alone is 256 KiB and every MLP kernel
        # 128 KiB; at a 256 KiB limit a save that wrote each array to a file of its own fitted.
        if step == 4:
            resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, hard))
        return real(run, state, episodes, step, **kwargs)

    monkeypatch.setattr(run_lib, "update", disk_full_from_step_4)
    try:
        with pytest.raises(CheckpointSaveError) as failed:
            train(cfg, workdir, progress=False)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, sigxfsz)
    checkpoints = os.path.join(workdir, "checkpoints")
    assert str(failed.value) == (f"saving the checkpoint of step 4 in {checkpoints} failed: "
                                 "OUT_OF_RANGE: File too large (errno 27) (step 2's checkpoint "
                                 "is intact)")
    assert [r["step"] for r in _records(workdir)] == [1, 2, 3, 4]  # stopped at once
    assert os.listdir(checkpoints) == ["2"]  # no temporary directory; keep=1 kept step 2
    assert _restored_step(cfg, workdir) == 2


@pytest.mark.slow  # a run until it stops
def test_repeated_non_finite_updates_stop_with_checkpoint_intact(tmp_path, monkeypatch):
    workdir = str(tmp_path / "nan")
    cfg = tiny_config(**{"training.total_steps": 6, "training.max_skipped_updates": 1,
                         })
    real = run_lib.update

    def poisoned(run, state, episodes, step, **kwargs):
        if step >= 3:
            for ep in episodes:
                ep.reward = float("nan")
        return real(run, state, episodes, step, **kwargs)

    monkeypatch.setattr(run_lib, "update", poisoned)
    with pytest.raises(TrainingDiverged):
        train(cfg, workdir, progress=False)
    assert _restored_step(cfg, workdir) == 2


def _restored_step(config, workdir):
    """The step of the newest checkpoint of ``workdir`` that restores."""
    run, fresh = build_run(read_config(config))
    try:
        with Checkpointer(os.path.join(workdir, "checkpoints"), async_save=False) as ckpt:
            restored = state_lib.restore(ckpt, fresh, run.shardings)
        assert restored is not None
        return restored[0].step_int
    finally:
        run.policy.close()


def test_evaluate_reads_the_run_config(full_run):
    from agentic_jax.evaluate import evaluate_checkpoint

    workdir, summary = full_run
    # No config given: the recorded one (with tiny_config's overrides) is used, so the newest
    # checkpoint scores exactly what the run's own final evaluation did.
    results = evaluate_checkpoint(None, workdir)
    assert results["step"] == 4
    assert results["tools"] == summary["final"]["tools"]
    assert results["direct"] == summary["final"]["direct"]


def test_evaluate_a_config_before_any_training(full_run, tmp_path):
    """A directory without checkpoints and a config: the config's model as built, which is
    what the run evaluated at its start (no warm start in tiny_config)."""
    from agentic_jax.evaluate import evaluate_checkpoint

    _, summary = full_run
    results = evaluate_checkpoint(tiny_config(), str(tmp_path / "before"))
    assert results["step"] == 0
    assert results["tools"] == summary["initial"]["tools"]
    assert results["direct"] == summary["initial"]["direct"]
    timing = results["timing"]["tools"]
    assert timing["wall_s"] > 0 and timing["cpu_s"] > 0
    assert timing["response_tokens"] == pytest.approx(
        results["tools"]["response_length"] * results["tools"]["num_problems"])
    assert os.path.exists(tmp_path / "before" / "eval_test.json")
    with pytest.raises(FileNotFoundError, match="with --config, the config's model is"):
        evaluate_checkpoint(None, str(tmp_path / "empty"))


def test_evaluate_one_mode_scores_what_both_do(full_run):
    """``--modes=tools`` runs only the tool loop, and scores it exactly as the run's own final
    evaluation did; an unknown mode is a clear error."""
    from agentic_jax.errors import UserError
    from agentic_jax.evaluate import evaluate_checkpoint

    workdir, summary = full_run
    results = evaluate_checkpoint(None, workdir, modes=["tools"])
    assert "direct" not in results and list(results["timing"]) == ["tools"]
    assert results["tools"] == summary["final"]["tools"]
    with pytest.raises(UserError, match="--modes: expected tools and / or direct"):
        evaluate_checkpoint(None, workdir, modes=["both"])


def test_evaluate_another_directory_of_checkpoints(full_run, tmp_path):
    """``--checkpoints=DIR`` (e.g. WORKDIR/warmstart) takes the newest checkpoint from there,
    with the run's config, and writes eval_<split>_<name>.json."""
    import shutil

    from agentic_jax.evaluate import evaluate_checkpoint

    workdir, summary = full_run
    kept = tmp_path / "kept"
    shutil.copytree(os.path.join(workdir, "checkpoints"), kept)
    results = evaluate_checkpoint(None, workdir, checkpoints=str(kept), modes=["tools"])
    assert results["step"] == 4 and results["checkpoints"] == str(kept)
    assert results["tools"] == summary["final"]["tools"]
    assert os.path.exists(os.path.join(workdir, "eval_test_kept.json"))
    with pytest.raises(FileNotFoundError, match="no restorable checkpoint"):
        evaluate_checkpoint(None, workdir, checkpoints=str(tmp_path / "empty"),
                            modes=["tools"])


def test_evaluations_store_outcomes_and_compare_paired(full_run, tmp_path):
    """Each evaluation stores every problem's outcome by id; ``--compare`` pairs two of them:
    the accuracies it prints are the evaluations' own, and the counts add up."""
    import json

    from agentic_jax.errors import UserError
    from agentic_jax.evaluate import compare_evaluations, evaluate_checkpoint

    workdir, summary = full_run
    before = evaluate_checkpoint(tiny_config(), str(tmp_path / "before"), modes=["tools"])
    after = evaluate_checkpoint(None, workdir, modes=["tools"])
    for result in (before, after):
        outcomes = result["outcomes"]["tools"]
        assert result["samples"] == 1 and len(outcomes) == result["tools"]["num_problems"]
        assert set(outcomes.values()) <= {0, 1}
        assert sum(outcomes.values()) / len(outcomes) == pytest.approx(
            result["tools"]["accuracy"])
    assert before["outcomes"]["tools"].keys() == after["outcomes"]["tools"].keys()
    a, b = str(tmp_path / "before" / "eval_test.json"), os.path.join(workdir, "eval_test.json")
    (line,) = compare_evaluations(a, b)
    acc_a, acc_b = before["tools"]["accuracy"], after["tools"]["accuracy"]
    assert line.startswith(f"tools: {acc_a:.3f} -> {acc_b:.3f} on "
                           f"{len(after['outcomes']['tools'])} problems: {acc_b - acc_a:+.3f}")
    # Files without outcomes (written before they were stored) or of other problems: refused.
    old = tmp_path / "old.json"
    old.write_text(json.dumps({k: v for k, v in before.items() if k != "outcomes"}))
    with pytest.raises(UserError, match="evaluate again"):
        compare_evaluations(str(old), b)
    fewer = tmp_path / "fewer.json"
    cut = dict(list(before["outcomes"]["tools"].items())[1:])
    fewer.write_text(json.dumps({**before, "outcomes": {"tools": cut}}))
    with pytest.raises(UserError, match="1 only in the second"):
        compare_evaluations(str(fewer), b)
    several = tmp_path / "several.json"
    several.write_text(json.dumps({**before, "samples": 4}))
    with pytest.raises(UserError, match="one sample per problem"):
        compare_evaluations(str(several), b)
    with pytest.raises(UserError, match="not a readable evaluation"):
        compare_evaluations(str(tmp_path / "missing.json"), b)


@pytest.mark.slow  # tests/train/test_grading.py runs verify mode on the sandbox by default
def test_verify_reward_check_reaches_the_grader_with_the_sandbox(tmp_path, monkeypatch):
    import agentic_jax.episodes.grading as grading_lib

    real, calls = grading_lib.grade_batch, []

    def recording(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(grading_lib, "grade_batch", recording)
    cfg = tiny_config(**{"rl.reward_check": "verify", "training.total_steps": 2})
    train(cfg, str(tmp_path / "verify"), progress=False)
    # Every grading of the run (steps and evaluations) used the verification layer, with the
    # problems and the run's sandbox (which runs their tests).
    assert len(calls) >= 2 + 4
    for kwargs in calls:
        assert kwargs["cfg"].use_verification and kwargs["sandbox"] is not None
        assert kwargs["problems"] and all(p.tests for p in kwargs["problems"])
