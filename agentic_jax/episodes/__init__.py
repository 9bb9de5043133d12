"""Running a policy on problems, below both training and evaluation: opening a run (`open`:
its recorded config, `rundir`, and a pretrained model's defaults, `model_defaults`), the run's
problems (`problems`), `policy.Policy` (the inference policy with its problems), the agent's
rows and grading (`grading`), sampling episodes for evaluation (`sampling`), episode metrics
(`metrics`) and every host's episodes on every host (`gather`). It imports nothing of
`agentic_jax.training` or `agentic_jax.evaluation`. Nothing is imported here: callers import
the submodules."""
