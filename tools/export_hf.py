"""A training run's policy as a Hugging Face directory, and an HF model as a run checkpoint.

    python tools/export_hf.py --workdir=RUN [--step=N] --out=HF_DIR
    python tools/export_hf.py --hf=HF_DIR --out=CKPT_DIR [--value_head] [--dtype=bfloat16]

The first reads RUN/config.json (the run's resolved config) and the policy parameters of
RUN/checkpoints/N (default: the newest step), and writes a directory that transformers loads
with the trained model's logits: LoRA adapters merged, the source model's (or the built-in)
tokenizer and generation config beside it. The second writes CKPT_DIR/checkpoints/0 holding
`{"params": ...}` as a run checkpoint does, for `checkpoint.init_from=CKPT_DIR`.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any, NamedTuple

import jax
import orbax.checkpoint as ocp
from flax import nnx, traverse_util

from agentic_jax.errors import UserError
from agentic_jax.models import (
    ModelConfig,
    Transformer,
    from_pretrained,
    get_preset,
    save_pretrained,
)
from agentic_jax.models.hf import read_json
from agentic_jax.models.hf_config import config_from_hf
from agentic_jax.models.pretrained import model_summary

CHECKPOINTS = "checkpoints"


class RunModel(NamedTuple):
    """What a run directory says of its policy."""

    cfg: ModelConfig
    source_dir: Path | None     # the HF directory the run started from, if any
    tokenizer_dir: Path         # where the run's tokenizer files are


def run_model(workdir: Path) -> RunModel:
    """The ModelConfig a run trained, from its config.json (the fields the run's builders read:
    model.path or model.preset, dtypes, value head, LoRA; tiny presets take the tokenizer's
    vocabulary and the training length, as the run did)."""
    from agentic_jax.data.tokenizer import ASSET_DIR, load_tokenizer
    from agentic_jax.models.builtin import checkpoint_dir

    record = read_json(workdir / "config.json")
    run = record.get("config", record)  # {"config": ..., "num_params": ...}, or the bare config
    m, t = run["model"], run.get("training", {})
    # A .gguf file or a built-in checkpoint preset trained from its cached conversion.
    m = {**m, "path": checkpoint_dir(m.get("preset", ""), m.get("path", ""))}
    tokenizer_dir = Path(run.get("tokenizer", {}).get("path") or m.get("path") or ASSET_DIR)
    fields = dict(dtype=m["dtype"], param_dtype=m["param_dtype"],
                  value_head=bool(m.get("value_head", False)))
    fields.update({k: m[k] for k in ("lora_rank", "lora_alpha", "lora_targets") if k in m})
    if m.get("path"):
        source = Path(m["path"])
        cfg = config_from_hf(read_json(source / "config.json"),
                             source=str(source / "config.json"), **fields)
        return RunModel(cfg, source, tokenizer_dir)
    tokenizer = load_tokenizer(tokenizer_dir)
    cfg = get_preset(m["preset"], **fields)
    if m["preset"].startswith("tiny"):
        cfg = dataclasses.replace(cfg, vocab_size=len(tokenizer))
    cfg = dataclasses.replace(
        cfg, max_seq_len=max(cfg.max_seq_len, int(t.get("max_length", 0))),
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id)
    return RunModel(cfg, None, tokenizer_dir)


def read_policy(checkpoints: Path, info: RunModel, step: int | None) -> tuple[Transformer, int]:
    """The policy of one checkpoint step (newest when None). Only `state/params` is read (the
    model state as a pure dict), whatever else the training state holds; parameters a
    checkpoint leaves out (the frozen base of a LoRA run) come from the run's model.path."""
    manager = ocp.CheckpointManager(checkpoints.absolute())
    steps = sorted(manager.all_steps())  # a new manager has just read the directory
    if not steps:
        raise FileNotFoundError(f"{checkpoints}: no checkpoint steps")
    if step is None:
        step = steps[-1]
    elif step not in steps:
        raise UserError(f"--step={step}: no such checkpoint in {checkpoints}; have {steps}")
    graphdef, abstract = nnx.split(nnx.eval_shape(lambda: Transformer(info.cfg,
                                                                      rngs=nnx.Rngs(0))))
    wanted = traverse_util.flatten_dict(nnx.to_pure_dict(abstract))
    stored = traverse_util.flatten_dict(ocp.PyTreeCheckpointer().metadata(
        checkpoints.absolute() / str(step) / "state").item_metadata.tree["params"])
    params = _base_params(info, [path for path in wanted if path not in stored], checkpoints)
    host = jax.sharding.SingleDeviceSharding(jax.local_devices(backend="cpu")[0])
    target = {"params": traverse_util.unflatten_dict({
        path: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=host)
        for path, x in wanted.items() if path in stored})}
    state_args = ocp.args.PyTreeRestore(
        item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target),
        partial_restore=True)
    restored = manager.restore(step, args=ocp.args.Composite(state=state_args))
    manager.close()
    params.update(traverse_util.flatten_dict(restored["state"]["params"]))
    nnx.replace_by_pure_dict(abstract, traverse_util.unflatten_dict(params))
    return nnx.merge(graphdef, abstract), step


def _base_params(info: RunModel, missing: list[tuple[str, ...]],
                 checkpoints: Path) -> dict[tuple[str, ...], Any]:
    """Flat parameters for the paths a checkpoint does not store, from the run's HF source."""
    if not missing:
        return {}
    if info.source_dir is None:
        raise UserError(f"{checkpoints}: the checkpoint has no {'/'.join(missing[0])} and the "
                        f"run names no model.path to take it from")
    cfg = info.cfg
    base = from_pretrained(info.source_dir, dtype=cfg.dtype, param_dtype=cfg.param_dtype,
                           value_head=cfg.value_head, lora_rank=cfg.lora_rank,
                           lora_alpha=cfg.lora_alpha, lora_targets=cfg.lora_targets)
    flat = traverse_util.flatten_dict(nnx.to_pure_dict(nnx.state(base)))
    return {path: flat[path] for path in missing}


def export_run(workdir: Path, out: Path, step: int | None = None) -> str:
    """Run -> HF directory; returns the line to print."""
    if not (workdir / "config.json").is_file() or not (workdir / CHECKPOINTS).is_dir():
        raise FileNotFoundError(f"{workdir}: not a run directory (config.json and "
                                f"{CHECKPOINTS}/ expected)")
    info = run_model(workdir)
    model, step = read_policy(workdir / CHECKPOINTS, info, step)
    save_pretrained(model, out, source_dir=info.source_dir, tokenizer_dir=info.tokenizer_dir)
    return f"wrote {out} from step {step}; {model_summary(info.cfg)}"


def write_init_checkpoint(model: Transformer, out: Path) -> None:
    """`{"params": pure dict}` at step 0 of OUT/checkpoints, the layout `init_from` reads."""
    directory = (out / CHECKPOINTS).absolute()
    if directory.exists() and any(directory.iterdir()):
        raise FileExistsError(f"{directory}: already holds checkpoints; choose a new --out")
    state: dict[str, Any] = {"params": nnx.to_pure_dict(nnx.state(model))}
    options = ocp.CheckpointManagerOptions(create=True, enable_async_checkpointing=False)
    with ocp.CheckpointManager(directory, options=options) as manager:
        manager.save(0, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                meta=ocp.args.JsonSave({"step": 0})))
        manager.wait_until_finished()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--workdir", type=Path, help="a training run directory (run -> HF)")
    source.add_argument("--hf", type=Path, help="a Hugging Face directory (HF -> checkpoint)")
    parser.add_argument("--out", type=Path, required=True, help="the directory to write")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (run -> HF)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                        help="parameter dtype of the checkpoint (HF -> checkpoint)")
    parser.add_argument("--value_head", action="store_true",
                        help="add a zero value head, as PPO runs have (HF -> checkpoint)")
    args = parser.parse_args(argv)
    try:
        if args.workdir is not None:
            print(export_run(args.workdir, args.out, args.step))
        else:
            model = from_pretrained(args.hf, dtype=args.dtype, value_head=args.value_head)
            write_init_checkpoint(model, args.out)
            print(f"wrote {args.out / CHECKPOINTS}/0; {model_summary(model.cfg, str(args.hf))}")
    except (OSError, UserError) as err:
        print(f"export_hf: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
