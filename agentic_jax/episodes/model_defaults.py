"""Settings that follow from the model: a pretrained checkpoint is not trained with the tiny
model's learning rate, prompt template, episode length and warm start.

With ``model.auto_defaults`` (on in the default config), a run whose model is pretrained
(``model.path``, a ``.gguf`` file or a built-in checkpoint preset) takes
`agentic_jax.models.pretrained.pretrained_defaults` for every key the command line did not
set, and says what it chose. The choice is written into the config the run records, with
``auto_defaults`` off, so a rerun or an evaluation of the run keeps exactly those values.
Config variants written for a pretrained model (``:hf``, ``:smollm2-135m``) set their values
themselves and turn ``auto_defaults`` off.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ml_collections

from agentic_jax.config import read_config
from agentic_jax.episodes import rundir
from agentic_jax.utils import read_json


def with_model_defaults(config: ml_collections.ConfigDict, overrides: Mapping[str, Any]
                        ) -> tuple[ml_collections.ConfigDict, list[str]]:
    """``config`` with the pretrained defaults filled in where ``overrides`` (the command
    line's ``--config.*`` values) did not choose, and one line per value chosen."""
    if not config.model.get("auto_defaults", False):
        return config, []
    cfg = read_config(config)
    if not cfg.model.path:
        return config, []
    from agentic_jax.models.hf_config import config_from_hf
    from agentic_jax.models.pretrained import pretrained_defaults
    from agentic_jax.inference.policy import run_tokenizer
    from agentic_jax.episodes.problems import encode_prompt, load_problems

    before, config = config, ml_collections.ConfigDict(config.to_dict())  # the given one stays
    tokenizer = run_tokenizer(cfg)
    has_chat = bool(getattr(tokenizer, "chat_template", None))
    if "data.template" not in overrides:  # the prompts' length depends on the template
        config.data.template = "chat" if has_chat else "zero"
    cfg = read_config(config)
    problems = load_problems(cfg)
    longest = max(len(encode_prompt(cfg, tokenizer, x)) for x in problems.every())
    model_cfg = config_from_hf(read_json(f"{cfg.model.path}/config.json"),
                               lora_rank=cfg.model.lora_rank)
    chosen = []
    defaults = pretrained_defaults(model_cfg, has_chat_template=has_chat, longest_prompt=longest,
                                   response_tokens=int(config.model.response_tokens))
    for key, value in defaults.items():
        if key in overrides:
            continue
        old = rundir.get_value(before, key)
        rundir.set_value(config, key, value)
        chosen.append(f"{key}={value!r}" + (f" (not {old!r})" if old != value else ""))
    config.model.auto_defaults = False
    lines = [f"pretrained model: chose {', '.join(chosen)}; longest prompt {longest} tokens; "
             "--config.KEY=VALUE overrides any of them"] if chosen else []
    return config, lines
