"""The training run: `run.train` (the loop) over `builders.build_run` (the run's frozen pieces),
rollouts (`rollouts`, `async_rollouts`, `stream`, `dynamic_sampling`), the update (`update`,
over the algorithm in `agentic_jax.rl`), the warm start (`warmstart`, `warmstart_data`, the
shipped results under ``assets/warmstart/``), preemption and transcripts. The run's problems,
policy, grading, episode metrics and run directory are `agentic_jax.episodes`'. Nothing is
imported here: callers import the submodules."""
