"""A model-size sweep for the scaling law: the tiny ladder × seeds, run one after another.

Variants (the string after ``:``):
  (none)  four sizes spanning 84x parameters (189K to 15.9M), two seeds, 60 PPO steps each.
  cpu     what a 2-core machine runs in about half an hour: four sizes spanning 45x (92K to
          4.2M), two seeds, a 1,000-step warm start and 12 PPO steps of 16 prompts each.
  smoke   the same sizes and seeds on the trainer's smoke config, 4 steps each: checks the
          machinery end to end, says nothing about the law.
  large   adds tiny-60m, three seeds and 200 steps per run.

  python tools/run_sweep.py --config=configs/scaling_sweep.py --sweep_dir=DIR [--dry_run]

Each run is ``python -m <trainer_module> --config=<base_config> --workdir=DIR/<preset>_seed<S>
--config.model.preset=<preset> --config.seed=<S> --config.training.total_steps=<total_steps>``
plus ``--config.<override>`` for each entry of ``overrides`` ("training.batch_size=16").
"""

import ml_collections


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = arg or "default"
    c = ml_collections.ConfigDict()
    c.base_config = "configs/math_ppo.py"
    c.trainer_module = "agentic_jax.train"
    c.presets = ("tiny-0.2m", "tiny-1m", "tiny-4m", "tiny-16m")  # names in agentic_jax.models
    c.seeds = (0, 1)
    c.total_steps = 60
    c.overrides = ()  # extra "group.key=value" overrides of the base config

    c.fit = ml_collections.ConfigDict()
    c.fit.success_key = "accuracy"
    c.fit.fix_bias_at_zero = False
    c.fit.l2 = 0.0
    c.fit.num_bootstrap = 200  # resamples of whole runs
    c.fit.confidence = 0.95
    c.fit.seed = 0

    if variant == "cpu":
        c.presets = ("tiny-0.1m", "tiny-0.2m", "tiny-1m", "tiny-4m")
        c.total_steps = 12
        # The arithmetic kinds and the tool fraction the published sweep ran with (the default
        # run has since added quadratics and lowered the fraction).
        c.overrides = ("warmstart.steps=1000", "training.batch_size=16",
                       "training.warmup_steps=2", "data.eval_size=64",
                       "checkpoint.every_steps=100", "logging.progress=False",
                       "data.stages=('arithmetic',)",
                       "data.kinds=('sum','difference','product')",
                       "warmstart.tool_fraction=0.5")
    elif variant == "smoke":
        c.base_config = "configs/math_ppo.py:smoke"
        c.total_steps = 4
        c.fit.num_bootstrap = 20
    elif variant == "large":
        c.presets = ("tiny-0.2m", "tiny-1m", "tiny-4m", "tiny-16m", "tiny-60m")
        c.seeds = (0, 1, 2)
        c.total_steps = 200
    elif variant != "default":
        raise ValueError(f"unknown config variant {variant!r}; expected 'cpu', 'smoke', "
                         "'large' or none")
    return c
