"""The training run: `run.train` (the loop) over `builders.build_run` (the run's frozen pieces),
rollouts (`rollouts`, `async_rollouts`, `dynamic_sampling`, `episode_gather`), the update
(`update`, over the algorithm in `agentic_jax.rl`), the run's problems (`problems`), the warm
start (`warmstart`, `warmstart_data`, the shipped results under ``assets/warmstart/``), the run
directory (`rundir`, `model_defaults`), step metrics (`metrics`) and transcripts. Nothing is
imported here: callers import the submodules."""
