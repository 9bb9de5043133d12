"""Convert model weights between Hugging Face directories and orbax parameter checkpoints.

    python tools/convert_checkpoint.py hf-to-orbax --src HF_DIR --dst OUT [--dtype bfloat16]
    python tools/convert_checkpoint.py orbax-to-hf --src OUT --dst HF_DIR
    python tools/convert_checkpoint.py hf-to-hf --src HF_DIR --dst HF_DIR2 --dtype bfloat16

An orbax parameter checkpoint is a directory with `model_config.json` (the ModelConfig fields)
and `params/` (orbax StandardCheckpointer, the model's parameters as a nested dict). A training
run's directory is not one: tools/export_hf.py exports runs (and writes the checkpoints that
`checkpoint.init_from` reads). Errors are one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import orbax.checkpoint as ocp
from flax import nnx

from agentic_jax.errors import UserError
from agentic_jax.models import ModelConfig, Transformer, from_pretrained, save_pretrained

CONFIG_FILE = "model_config.json"
PARAMS_DIR = "params"


def save_orbax(model: Transformer, directory: Path) -> None:
    """Writes `model` as an orbax parameter checkpoint (refuses to overwrite one)."""
    directory = directory.absolute()
    if (directory / PARAMS_DIR).exists():
        raise FileExistsError(f"{directory / PARAMS_DIR}: already exists; choose a new --dst")
    directory.mkdir(parents=True, exist_ok=True)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(directory / PARAMS_DIR, nnx.to_pure_dict(nnx.state(model, nnx.Param)))
    checkpointer.wait_until_finished()
    (directory / CONFIG_FILE).write_text(json.dumps(dataclasses.asdict(model.cfg), indent=2))


def load_orbax(directory: Path) -> Transformer:
    """Reads an orbax parameter checkpoint written by `save_orbax`."""
    directory = directory.absolute()
    config_file = directory / CONFIG_FILE
    if (directory / "checkpoints").is_dir() or (directory.name == "checkpoints"):
        run = directory.parent if directory.name == "checkpoints" else directory
        raise UserError(f"{directory}: a training run's checkpoints, not a parameter "
                        f"checkpoint; export it with: python tools/export_hf.py "
                        f"--workdir={run} --out=DIR")
    if not config_file.exists():
        raise FileNotFoundError(f"{config_file}: not found (not an orbax parameter checkpoint)")
    try:
        cfg = ModelConfig(**json.loads(config_file.read_text()))
    except (TypeError, ValueError) as err:
        raise UserError(f"{config_file}: not a model config ({err})") from None
    graphdef, abstract = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))
    target = nnx.to_pure_dict(abstract)
    restored = ocp.StandardCheckpointer().restore(directory / PARAMS_DIR, target)
    nnx.replace_by_pure_dict(abstract, restored)
    return nnx.merge(graphdef, abstract)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("direction", choices=["hf-to-orbax", "orbax-to-hf", "hf-to-hf"])
    parser.add_argument("--src", type=Path, required=True, help="source directory")
    parser.add_argument("--dst", type=Path, required=True, help="destination directory")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                        help="parameter dtype when reading a Hugging Face directory")
    parser.add_argument("--value_head", action="store_true",
                        help="keep (or add a zero-initialised) value head")
    args = parser.parse_args(argv)
    try:
        convert(args)
    except (OSError, UserError) as err:
        print(f"convert_checkpoint: {err}", file=sys.stderr)
        return 2
    return 0


def convert(args: argparse.Namespace) -> None:
    if args.direction == "orbax-to-hf":
        model = load_orbax(args.src)
    else:
        model = from_pretrained(args.src, dtype=args.dtype, value_head=args.value_head)
    if args.direction == "hf-to-orbax":
        save_orbax(model, args.dst)
    else:
        source = args.src if args.direction == "hf-to-hf" else None
        save_pretrained(model, args.dst, source_dir=source)
    print(f"wrote {args.dst} ({model.cfg.num_params():,} parameters, {model.cfg.family})")


if __name__ == "__main__":
    sys.exit(main())
