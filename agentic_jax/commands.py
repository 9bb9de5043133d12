"""The package's commands and the config variants, described from their own docstrings.

A command's one line is the first sentence of its module's docstring; a config variant's is the
first sentence of its entry in the config file's ``Variants`` block. Docstrings are read with
`ast`: listing the commands imports none of them.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re

# `python -m agentic_jax.<name>`, in the order a user meets them.
COMMANDS = ("train", "evaluate", "serve", "apps.grade", "apps.derivation", "apps.plot",
            "apps.practice")

# The config of a source checkout (`configs/` is not part of an installed package).
DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                              "configs", "math_ppo.py")

LINE_CHARS = 100  # a listing's lines, name column included

_SENTENCE_END = re.compile(r"\.(?=\s+[A-Z]|\s*$)")
_ASIDE = re.compile(r"\s*\([^()]*\)")
_VARIANT = re.compile(r"  (\S+)(?: {2,}(\S.*))?$")


def one_line(text: str, width: int) -> str:
    """The first sentence of ``text``'s first paragraph in at most ``width`` characters: when
    longer, the part before its first colon, then without parenthesised asides, then up to
    the last comma or semicolon that fits, then cut at a word."""
    text = " ".join(text.strip().split("\n\n")[0].split())
    end = _SENTENCE_END.search(text)
    line = text[:end.start()] if end else text
    if len(line) > width and ":" in line:
        line = line[:line.index(":")]
    if len(line) > width:
        line = _ASIDE.sub("", line)
    if len(line) > width:
        clause = max(line.rfind(", ", 0, width), line.rfind("; ", 0, width))
        if clause > 0:
            line = line[:clause]
        else:
            head = line[:width - 2]
            line = (head.rsplit(" ", 1)[0] if " " in head else head[:width - 3]) + "..."
    return line


def listing(described: dict[str, str]) -> str:
    """Two columns, names and their one lines, within `LINE_CHARS`."""
    column = max(map(len, described)) + 2
    return "\n".join(f"  {name:<{column}}{one_line(text, LINE_CHARS - column - 2)}"
                     for name, text in described.items()) + "\n"


def file_docstring(path: str) -> str:
    """The module docstring of the Python file at ``path`` ("" when it has none)."""
    with open(path, encoding="utf-8") as f:
        return ast.get_docstring(ast.parse(f.read(), filename=path)) or ""


def command_docstring(name: str) -> str:
    """The docstring of ``agentic_jax.<name>`` (a module, or a package run by its __main__)."""
    spec = importlib.util.find_spec(f"agentic_jax.{name}")
    if spec is None or spec.origin is None:
        raise ValueError(f"no command agentic_jax.{name}")
    path = spec.origin
    if spec.submodule_search_locations is not None:   # a package: its __main__ is the command
        path = os.path.join(os.path.dirname(path), "__main__.py")
    return file_docstring(path)


def commands_usage() -> str:
    """What ``python -m agentic_jax`` prints: every command with its one line."""
    return ("usage: python -m agentic_jax.<command> [flags]   (or python -m agentic_jax "
            "<command> [flags])\n\ncommands (each with --help for its flags):\n"
            + listing({name: command_docstring(name) for name in COMMANDS}))


def config_variants(path: str) -> dict[str, str]:
    """{variant: description} from the ``Variants`` block of the config file's docstring
    (entries indented two spaces, the name then two or more spaces, continuation lines
    indented further; the block ends at a blank line). "(none)" names the default."""
    variants: dict[str, str] = {}
    lines = iter(file_docstring(path).splitlines())
    for line in lines:
        if line.startswith("Variants"):
            break
    name = None
    for line in lines:
        if not line.strip():
            break
        entry = _VARIANT.match(line)
        if entry:
            name = entry.group(1)
            variants[name] = entry.group(2) or ""
        elif name is not None:
            variants[name] = f"{variants[name]} {line.strip()}".strip()
    return variants


def variant_names(path: str) -> list[str]:
    """The names in the config file's ``VARIANTS`` ("(none)" for "default"); loading the file
    runs it, as ``--config`` does."""
    spec = importlib.util.spec_from_file_location("_config_variants", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return ["(none)" if name == "default" else name for name in getattr(module, "VARIANTS", {})]


def variants_usage(path: str = DEFAULT_CONFIG) -> str:
    """The config variants a ``--help`` lists, each with its one line (a variant missing from
    the docstring's block is listed as such)."""
    shown = os.path.relpath(path) if os.path.exists(path) else path
    if not os.path.exists(path):
        return (f"\nconfig variants: {shown} is not here (the configs come with a source "
                f"checkout)\n")
    described = config_variants(path)
    variants = {name: described.get(name, "(not described in the config's docstring)")
                for name in {**dict.fromkeys(described), **dict.fromkeys(variant_names(path))}}
    if not variants:
        return f"\nconfig variants: {shown} has none\n"
    return (f"\nconfig variants (--config={shown}:<variant>; (none): the default):\n"
            + listing(variants))
