"""The package's commands.

    python -m agentic_jax                       # lists them, one line each
    python -m agentic_jax <command> [flags]     # the same as python -m agentic_jax.<command>
"""

from __future__ import annotations

import runpy
import sys

from agentic_jax.commands import COMMANDS, commands_usage


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] in ("-h", "--help", "help"):
        print(commands_usage(), end="")
        return 0
    name = argv[1]
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}; expected one of {', '.join(COMMANDS)}",
              file=sys.stderr)
        return 2
    sys.argv = [f"python -m agentic_jax.{name}", *argv[2:]]
    runpy.run_module(f"agentic_jax.{name}", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
