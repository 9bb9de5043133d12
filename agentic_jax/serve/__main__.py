r"""Serves a policy with its tool loop: an OpenAI-compatible API and the tools' web page.

    python -m agentic_jax.serve --workdir=RUN [--port=8000] [--host=127.0.0.1] [--constrain_code]
        [--allowed_hosts=name,...]
    python -m agentic_jax.serve --config=configs/math_ppo.py --config.model.path=HF_DIR

Routes: ``GET /`` (the page), ``GET /health``, ``GET /v1/models``, ``GET /v1/models/{id}``,
``POST /v1/chat/completions`` (docs/serving.md) and the tools' ``/api/*``. Bound to loopback
unless ``--host`` says otherwise: the sandbox runs code that clients' prompts lead the policy to
write. Only the bound address, the loopback names and ``--allowed_hosts`` are answered as
``Host``, and POSTs from other web sites are refused (`agentic_jax.serve.boundary`). SIGTERM
lets the requests in flight finish (at most ``--drain_s``) while new ones get 503, then exits
(`agentic_jax.serve.drain`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys

from absl import app, flags
from absl import logging as absl_logging
from ml_collections import config_flags

from agentic_jax.errors import USER_ERRORS, UserError
from agentic_jax.utils.compile_cache import enable_compile_cache

# The default config of a source checkout, so that `--config.model.path=...` alone works.
_DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "configs", "math_ppo.py")
_CONFIG = config_flags.DEFINE_config_file(
    "config", _DEFAULT_CONFIG if os.path.exists(_DEFAULT_CONFIG) else None,
    "A config file (default: configs/math_ppo.py; with --workdir: fields the run's "
    "config.json lacks).", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "A run directory whose newest checkpoint "
                               "is served.")
_HOST = flags.DEFINE_string("host", "127.0.0.1", "Address to bind.")
_PORT = flags.DEFINE_integer("port", 8000, "Port to bind.")
_ALLOWED_HOSTS = flags.DEFINE_list(
    "allowed_hosts", [], "Host names answered besides the bound address and the loopback "
    "names (e.g. the machine's name when --host=0.0.0.0); other Host headers get 421.")
_MAX_BATCH = flags.DEFINE_integer("max_batch_rows", 32, "Episodes in the rollout loop at once.")
_MAX_QUEUE = flags.DEFINE_integer("max_queue", 64, "Queued requests before 429.")
_MAX_TOKENS = flags.DEFINE_integer("max_tokens", 4096, "Largest max_tokens a request may ask.")
_MAX_N = flags.DEFINE_integer("max_n", 8, "Largest n a request may ask.")
_TIMEOUT = flags.DEFINE_float("request_timeout_s", 300.0, "A request's wait for its reply.")
_BATCH_WAIT = flags.DEFINE_integer("batch_wait_ms", 20, "When idle, wait after a first "
                                   "request for others to start with it.")
_CONSTRAIN = flags.DEFINE_boolean(
    "constrain_code", False, "Inside ```python blocks, mask tokens that cannot continue valid "
    "Python (agentic_jax.rollout.constrain; needs llguidance).")
_DRAIN = flags.DEFINE_float("drain_s", 30.0, "On SIGTERM, how long requests in flight may "
                            "take to finish (new ones get 503) before the server exits.")
_WARMUP = flags.DEFINE_boolean(
    "warmup", True, "Compile every program the engine can run before serving (a minute or "
    "more on CPU, longer for larger models and max_length), so no request waits on a "
    "compilation; --nowarmup starts at once and compiles as requests need.")
_SEED = flags.DEFINE_integer("seed", 0, "Sampling seed of the first batch (later ones fold "
                             "in their index).")


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}", file=sys.stderr)
        return 2
    absl_logging.set_verbosity(absl_logging.WARNING)
    logging.basicConfig(level=logging.INFO)
    enable_compile_cache()
    import uvicorn

    from agentic_jax.serve.app import Service, create_app
    from agentic_jax.serve.drain import DrainingServer
    from agentic_jax.serve.boundary import allowed_hosts
    from agentic_jax.serve.loading import load_policy
    from agentic_jax.serve.schema import ServeLimits

    overrides = config_flags.get_override_values(flags.FLAGS["config"]) if _CONFIG.value else {}
    try:
        limits = ServeLimits(max_n=_MAX_N.value, max_tokens=_MAX_TOKENS.value,
                             max_batch_rows=_MAX_BATCH.value, max_queue=_MAX_QUEUE.value,
                             request_timeout_s=_TIMEOUT.value, batch_wait_ms=_BATCH_WAIT.value)
        loaded = load_policy(_CONFIG.value, _WORKDIR.value, overrides)
    except USER_ERRORS as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    policy = loaded.policy
    if _CONSTRAIN.value:  # serving only: training samples the policy unmasked
        from agentic_jax.rollout.constrain import code_constraint
        try:
            code_constraint(policy.tokenizer, policy.engine.model_cfg.vocab_size)
        except (ImportError, UserError) as err:
            print(f"error: --constrain_code: {err}", file=sys.stderr)
            return 2
        policy = dataclasses.replace(policy, agent_cfg=dataclasses.replace(
            policy.agent_cfg, constrain_code=True))
    if _WARMUP.value:
        print("compiling the engine's programs (--nowarmup skips this) ...", flush=True)
    service = Service.start(policy, limits, model_name=loaded.name, seed=_SEED.value,
                            warmup=_WARMUP.value)
    if _WARMUP.value:
        print(f"compiled {service.worker.warmup_programs} programs in "
              f"{service.worker.warmup_s:.0f} s", flush=True)
    try:
        print(f"serving {loaded.name} on http://{_HOST.value}:{_PORT.value}/ (pid {os.getpid()})",
              flush=True)
        server_app = create_app(service, hosts=allowed_hosts(_HOST.value, _ALLOWED_HOSTS.value))
        server = DrainingServer(uvicorn.Config(server_app, host=_HOST.value, port=_PORT.value,
                                               log_level="warning"),
                                service.drain, drain_s=_DRAIN.value)
        server.run()
    finally:
        service.close()
    return 0


if __name__ == "__main__":
    app.run(lambda argv: sys.exit(main(argv)))
