"""Stands in for `python -m agentic_jax.train` in sweep tests: same flags, synthetic metrics.

Fails (exit 3) when the preset equals $FAKE_TRAINER_FAIL; appends each call to $FAKE_TRAINER_LOG.
"""

import os
import sys

from scaling_fixtures import PRESET_PARAMS, write_synthetic_run


def main(argv: list[str]) -> int:
    flags = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    preset, workdir = flags["config.model.preset"], flags["workdir"]
    with open(os.environ["FAKE_TRAINER_LOG"], "a", encoding="utf-8") as f:
        f.write(f"{preset} {flags['config.seed']} {flags['config']}\n")
    if preset == os.environ.get("FAKE_TRAINER_FAIL"):
        return 3
    write_synthetic_run(
        workdir,
        PRESET_PARAMS[preset],
        int(flags["config.seed"]),
        steps=int(flags["config.training.total_steps"]),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
