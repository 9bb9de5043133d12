"""How a run begins: resumed from its newest checkpoint, or started fresh: the starting policy
(another run's weights with ``checkpoint.init_from``, a warm start, or the model as built) is
published to the sampler, evaluated (``initial_eval.json``), frozen as the KL reference and
checkpointed as step 0.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from agentic_jax.parallel import agree, is_main_process
from agentic_jax.rl import state as state_lib
from agentic_jax.rl.state import HostState, TrainState
from agentic_jax.training.builders import Run, publish
from agentic_jax.training.console import say
from agentic_jax.training.evaluators import Evaluators, evaluate_both
from agentic_jax.training.warmstart import warm_start
from agentic_jax.utils import Checkpointer, read_json, write_json

INITIAL_EVAL = "initial_eval.json"
WARMSTART_DIR = "warmstart"  # the warm start's own checkpoints (warmstart.checkpoint_every)


def host_state(run: Run) -> HostState:
    """The host-side state a checkpoint holds: the curriculum scheduler's and the tool
    controller's."""
    return HostState(scheduler=run.scheduler.state_dict(), controller=run.controller.state_dict())


def resume_or_start(run: Run, state: TrainState, checkpointer: Checkpointer, workdir: str,
                    progress: bool, evaluators: Evaluators) -> tuple[TrainState, dict]:
    """The state the RL steps start from and the run's ``initial_eval.json`` record: restored
    from the newest checkpoint, or a fresh start's, evaluated and saved as step 0."""
    restored = state_lib.restore(checkpointer, state, run.shardings)
    init_path = os.path.join(workdir, INITIAL_EVAL)
    if restored is not None:
        state, host = restored
        run.scheduler.load_state_dict(host.scheduler)
        run.controller.load_state_dict(host.controller)
        publish(run.policy, state.params, state.step_int)
        say(f"resuming from step {state.step_int} ({checkpointer.directory})")
        # Process 0 decides (a file may show up on one host's view of the disk before another's).
        if agree(os.path.exists(init_path)):
            return state, read_json(init_path)
    state, info = start(run, state, workdir, progress, evaluators.held_out)
    evaluators.benchmarks(run.policy, workdir, 0, run.cfg.training.total_steps)
    state_lib.save(checkpointer, state, host_state(run), force=True)
    if is_main_process():
        write_json(init_path, info)
    return state, info


def start(run: Run, state: TrainState, workdir: str, progress: bool,
          held_out: Callable[..., dict[str, float]]) -> tuple[TrainState, dict]:
    """A fresh run's starting policy: another run's weights (checkpoint.init_from), a warm
    start, or the model as built; evaluated, then frozen as the KL reference."""
    cfg, info = run.cfg, {}
    params = state.params
    if cfg.checkpoint.init_from:
        params, _ = state_lib.restore_params(cfg.checkpoint.init_from, state.params,
                                             run.shardings.state)
        info["init_from"] = cfg.checkpoint.init_from
    elif cfg.warmstart.enabled:
        run.policy.engine.sleep()  # its pool and weights are not needed until `publish`
        params, metrics = warm_start(run, params, progress=progress,
                                     directory=os.path.join(workdir, WARMSTART_DIR))
        info.update(metrics)
        if metrics.get("warmstart/shipped"):
            say(f"warm start: loaded the package's saved result of this recipe (training it "
                f"took {metrics.get('warmstart/trained_s', float('nan')):.0f} s; "
                "--config.warmstart.shipped=False trains it again)")
        else:
            say(f"warm start: {metrics['warmstart/examples']:.0f} examples "
                f"({metrics['warmstart/tool_fraction']:.0%} using the tool), "
                f"{cfg.warmstart.steps} steps, loss {metrics['warmstart/first_loss']:.3f} -> "
                f"{metrics['warmstart/loss']:.3f}, {metrics['warmstart/time_s']:.0f} s")
    publish(run.policy, params)
    info["initial"] = evaluate_both(run, held_out, workdir, 0)
    return state_lib.with_reference(state.replace(params=params), cfg.rl.needs_reference), info
