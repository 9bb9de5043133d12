"""`models` imports nothing of the other packages (the sharded loader included) but the
attention kernels (a leaf package below it), the error type (`agentic_jax.errors`) and the
cache directory (`agentic_jax.cache`), the last two modules of no imports of ours. `apps`
never imports `serve` (the server passes what the apps need of it in); `inference` is below
`serve`, `apps` and the commands, and imports neither the run's problems nor the benchmark
readers. `episodes` (running a policy on problems) is below `training` and `evaluation`, and
neither of those imports the other."""

import ast
import subprocess
import sys
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[2] / "agentic_jax"
_ALLOWED = ("agentic_jax.models", "agentic_jax.kernels", "agentic_jax.errors",
            "agentic_jax.cache")


def _imports(package: str) -> list[tuple[str, str]]:
    """(file, module) of every import in ``package``'s modules, those inside functions too."""
    out = []
    for file in sorted((_PACKAGE / package).glob("*.py")):
        for node in ast.walk(ast.parse(file.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            out += [(file.name, n) for n in names]
    return out


def test_no_module_of_models_imports_another_package():
    outside = [f"{file}: {n}" for file, n in _imports("models")
               if n.startswith("agentic_jax.") and not n.startswith(_ALLOWED)]
    assert outside == []


def test_no_module_of_apps_imports_serve():
    assert [f"{file}: {n}" for file, n in _imports("apps")
            if n.startswith("agentic_jax.serve")] == []


def _importing(package: str, above: tuple[str, ...]) -> list[str]:
    """Every import in ``package`` of a module in ``above`` or of one of their submodules
    (agentic_jax.train, the command, is not agentic_jax.training)."""
    return [f"{file}: {n}" for file, n in _imports(package)
            if any(n == a or n.startswith(a + ".") for a in above)]


def test_inference_imports_nothing_above_it():
    above = ("agentic_jax.serve", "agentic_jax.apps", "agentic_jax.evaluate",
             "agentic_jax.train", "agentic_jax.training", "agentic_jax.evaluation",
             "agentic_jax.episodes")
    assert _importing("inference", above) == []
    code = ("import sys; import agentic_jax.inference; "
            "print(','.join(sorted(m for m in sys.modules if m.startswith(("
            "'agentic_jax.episodes', 'agentic_jax.data.benchmarks', 'agentic_jax.serve', "
            "'agentic_jax.apps')))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert proc.stdout.strip() == ""


def test_episodes_import_neither_training_nor_evaluation():
    above = ("agentic_jax.training", "agentic_jax.evaluation", "agentic_jax.serve",
             "agentic_jax.apps", "agentic_jax.evaluate", "agentic_jax.train")
    assert _importing("episodes", above) == []


def test_training_and_evaluation_import_nothing_of_each_other():
    # The train command hands the run its evaluators (`training.evaluators.Evaluators`).
    assert _importing("evaluation", ("agentic_jax.training", "agentic_jax.train")) == []
    assert _importing("training", ("agentic_jax.evaluation", "agentic_jax.evaluate")) == []


def test_loading_onto_a_mesh_leaves_parallel_unimported():
    code = ("import sys; import agentic_jax.models.hf as hf; "
            "ours = sorted(m for m in sys.modules if m.startswith('agentic_jax.')); "
            "print(','.join(m for m in ours if not m.startswith(('agentic_jax.models', "
            "'agentic_jax.errors'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert proc.stdout.strip() == ""
