"""`models` imports nothing of the other packages (the sharded loader included) but the
attention kernels, a leaf package below it that imports nothing of ours, and the error type
(`agentic_jax.errors`, a module of no imports)."""

import ast
import subprocess
import sys
from pathlib import Path

_MODELS = Path(__file__).resolve().parents[2] / "agentic_jax" / "models"
_ALLOWED = ("agentic_jax.models", "agentic_jax.kernels", "agentic_jax.errors")


def test_no_module_of_models_imports_another_package():
    outside = []
    for file in sorted(_MODELS.glob("*.py")):
        for node in ast.walk(ast.parse(file.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            outside += [f"{file.name}: {n}" for n in names
                        if n.startswith("agentic_jax.") and not n.startswith(_ALLOWED)]
    assert outside == []


def test_loading_onto_a_mesh_leaves_parallel_unimported():
    code = ("import sys; import agentic_jax.models.hf as hf; "
            "ours = sorted(m for m in sys.modules if m.startswith('agentic_jax.')); "
            "print(','.join(m for m in ours if not m.startswith(('agentic_jax.models', "
            "'agentic_jax.errors'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert proc.stdout.strip() == ""
