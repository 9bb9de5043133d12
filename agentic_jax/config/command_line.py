"""Command-line parsing of the commands that take a config (`train`, `evaluate`): a bad flag is
one ``error:`` line and exit code 2, never absl's usage dump or a traceback."""

from __future__ import annotations

import re
import sys

from absl import flags


def parse_flags(argv: list[str]) -> list[str]:
    """absl's parse of ``argv``, for `absl.app.run(..., flags_parser=parse_flags)`.

    ``--config.FIELD=VALUE`` flags exist only beside ``--config=FILE``: ml_collections defines
    them from the file. Without it absl would call them unknown, so the error says what to add.
    On a run directory any config file carries them: the run's recorded config stays the base
    and the flags apply on top (`agentic_jax.episodes.rundir.with_record`).
    """
    args = argv[1:]
    overrides = [a for a in args if a.startswith("--config.")]
    has_config = any(a == "--config" or a.startswith("--config=") for a in args)
    if overrides and not has_config:
        field = overrides[0].split("=", 1)[0]
        _fail(f"{field} needs --config=FILE beside it (on a run directory the run's recorded "
              "config stays the base and the flags apply on top, so the recipe it ran serves, "
              "e.g. --config=configs/math_ppo.py:smollm2-135m-gsm8k)")
    try:
        return flags.FLAGS(argv)
    except flags.Error as err:
        _fail(str(err))
    except AttributeError as err:  # an override of a field the config does not have
        hint = " ".join(re.sub(r"\\n|[\\'\"]", " ", str(err)).split())
        _fail(f"unknown config field in {' '.join(overrides)}: {hint}")
    raise AssertionError("unreachable")


def _fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)
