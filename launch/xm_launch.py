r"""XManager launcher: one training run, or a sweep, on this machine, a TPU slice or GPU nodes.

Every job runs `python -m agentic_jax.train --config=... --workdir=...` in each of its processes;
the processes find each other through the environment their platform sets (GKE's TPU worker
variables, Vertex AI's CLUSTER_SPEC), which agentic_jax.parallel reads at start-up.

  # one run on this machine
  python launch/xm_launch.py --executor=local --config=configs/math_ppo.py:smoke \
      --workdir=/tmp/runs --config.training.lr=1e-4
  # qwen2.5-7b on a v5p-32 slice (16 chips, 4 hosts), via GKE
  python launch/xm_launch.py --executor=tpu --accelerator=v5p-32 \
      --config=configs/math_ppo.py:qwen2.5-7b --workdir=gs://BUCKET/runs
  # the same on four A3 nodes (4x8 H100), via Vertex AI
  python launch/xm_launch.py --executor=gpu --accelerator=h100-32 ...
  # every configuration of the scaling sweep; --dry_run prints the jobs instead of launching
  python launch/xm_launch.py --executor=tpu --accelerator=v6e-16 \
      --sweep=configs/scaling_sweep.py --workdir=gs://BUCKET/sweep --dry_run

Arguments of the form --config.a.b=v are passed through unchanged to every job. A sweep file
(configs/scaling_sweep.py) has `get_config(arg)` returning a ConfigDict with `presets` and
`seeds` (one job per pair, named PRESET_seedS), and optionally `base_config`, `trainer_module`,
`total_steps` and `overrides` ("group.key=value" strings for every job).
--dry_run needs no XManager installation; launching does (`pip install xmanager`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from absl import app, flags

_REPO_ROOT = Path(__file__).resolve().parents[1]
_MODULE = "agentic_jax.train"
_OVERRIDE_PREFIX = "--config."

# TPU generation -> (name counts TensorCores rather than chips, largest single-host slice in chips,
# topology rank). v4 and v5p names count two cores per chip; v5e and v6e names count chips.
_TPU_GENERATIONS = {"v4": (True, 4, 3), "v5p": (True, 4, 3), "v5e": (False, 8, 2),
                    "v5litepod": (False, 8, 2), "v6e": (False, 8, 2)}
_TPU_CHIPS_PER_HOST = 4
_GPU_KINDS = {"h100": "H100", "a3": "H100", "h200": "H200", "a100": "A100_80GIB"}

FLAGS = flags.FLAGS


@dataclasses.dataclass(frozen=True)
class Hardware:
    """Accelerators of one job: `hosts` processes, each with `per_host` local accelerators."""

    kind: str            # "cpu", a TPU generation ("v5p") or an xm GPU type ("H100")
    hosts: int = 1
    per_host: int = 0
    topology: str = ""   # TPU slice shape, e.g. "2x2x4"


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """One training job as it would be created: name, hardware and command-line arguments."""

    name: str
    executor: str
    hardware: Hardware
    args: tuple[str, ...]
    module: str = _MODULE

    def command(self) -> list[str]:
        return ["python", "-m", self.module, *self.args]

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "executor": self.executor,
                           **dataclasses.asdict(self.hardware), "command": self.command()})


def tpu_hardware(accelerator: str) -> Hardware:
    """Hosts, chips per host and topology of a TPU slice name such as v5p-32 or v5litepod-16."""
    generation, _, size = accelerator.lower().rpartition("-")
    if generation not in _TPU_GENERATIONS or not size.isdigit():
        raise ValueError(f"--accelerator {accelerator!r} is not a TPU slice; expected "
                         f"GENERATION-SIZE with GENERATION in {sorted(_TPU_GENERATIONS)}")
    counts_cores, single_host_max, rank = _TPU_GENERATIONS[generation]
    chips = int(size) // 2 if counts_cores else int(size)
    smallest = 4 if counts_cores else 1
    if chips < smallest or chips & (chips - 1) or (rank == 2 and chips == 2):
        raise ValueError(f"--accelerator {accelerator!r}: no {generation} slice of that size")
    hosts = 1 if chips <= single_host_max else chips // _TPU_CHIPS_PER_HOST
    return Hardware(kind=generation.replace("litepod", "e"), hosts=hosts,
                    per_host=chips // hosts, topology=_tpu_topology(chips, rank))


def _tpu_topology(chips: int, rank: int) -> str:
    """Slice shape by doubling the shortest side, last first: 32 chips -> 2x4x4 or 4x8."""
    dims = [2, 2, 1] if rank == 3 else [1, 1]
    while math.prod(dims) < chips:
        shortest = max(i for i, d in enumerate(dims) if d == min(dims))
        dims[shortest] *= 2
    return "x".join(map(str, dims))


def gpu_hardware(accelerator: str, gpus_per_node: int) -> Hardware:
    """Nodes and GPUs per node of KIND-COUNT, e.g. h100-32 is four A3 nodes of 8 H100."""
    kind, _, count = accelerator.lower().rpartition("-")
    if gpus_per_node < 1:
        raise ValueError(f"--gpus_per_node must be >= 1, got {gpus_per_node}")
    if kind not in _GPU_KINDS or not count.isdigit() or int(count) < 1:
        raise ValueError(f"--accelerator {accelerator!r} is not KIND-COUNT with KIND in "
                         f"{sorted(_GPU_KINDS)} (e.g. h100-16)")
    total = int(count)
    per_node = min(total, gpus_per_node)
    if total % per_node:
        raise ValueError(f"--accelerator {accelerator!r}: {total} GPUs do not fill nodes of "
                         f"--gpus_per_node={gpus_per_node}")
    return Hardware(kind=_GPU_KINDS[kind], hosts=total // per_node, per_host=per_node)


def hardware_for(executor: str, accelerator: str | None, gpus_per_node: int) -> Hardware:
    if executor == "local":
        if accelerator:
            raise ValueError("--accelerator is for --executor=tpu or gpu; local uses this machine")
        return Hardware(kind="cpu")
    if not accelerator:
        raise ValueError(f"--executor={executor} needs --accelerator (e.g. "
                         f"{'v5p-32' if executor == 'tpu' else 'h100-16'})")
    if executor == "tpu":
        return tpu_hardware(accelerator)
    return gpu_hardware(accelerator, gpus_per_node)


def load_sweep(sweep: str) -> Any:
    """Calls get_config(arg) of a sweep file given as PATH[:ARG]."""
    path, _, arg = sweep.partition(":")
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"--sweep file {path!r} does not exist")
    spec = importlib.util.spec_from_file_location(f"_sweep_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "get_config"):
        raise ValueError(f"--sweep file {path!r} has no get_config(arg)")
    return module.get_config(arg or None)


@dataclasses.dataclass(frozen=True)
class RunPoint:
    """One training run before hardware is attached: name, config string, module, overrides."""

    name: str
    config: str
    module: str = _MODULE
    overrides: tuple[str, ...] = ()


def sweep_points(sweep_cfg: Any, config: str) -> list[RunPoint]:
    """One run per (preset, seed) of a sweep config, e.g. configs/scaling_sweep.py.

    Fields read: `base_config` (default `config`), `trainer_module`, `presets`, `seeds`,
    `total_steps` and `overrides` ("group.key=value" strings applied to every run); others (such
    as the fit settings) belong to the tools that read the results.
    """
    base = sweep_cfg.get("base_config", config)
    module = sweep_cfg.get("trainer_module", _MODULE)
    shared = [f"{_OVERRIDE_PREFIX}{item}" for item in sweep_cfg.get("overrides", ())]
    if "total_steps" in sweep_cfg:
        shared.append(f"{_OVERRIDE_PREFIX}training.total_steps={sweep_cfg['total_steps']}")
    for item in shared:
        if "=" not in item:
            raise ValueError(f"sweep override {item.removeprefix(_OVERRIDE_PREFIX)!r} is not "
                             "group.key=value")
    presets = sweep_cfg.get("presets", ())
    if not presets:
        raise ValueError("sweep config has no presets to run")
    return [RunPoint(name=f"{preset}_seed{seed}", config=base, module=module,
                     overrides=(f"{_OVERRIDE_PREFIX}model.preset={preset}",
                                f"{_OVERRIDE_PREFIX}seed={seed}", *shared))
            for preset in presets for seed in sweep_cfg.get("seeds", (0,))]


def build_jobs(executor: str, hardware: Hardware, config: str, workdir: str,
               overrides: Sequence[str], sweep_cfg: Any | None = None) -> list[JobSpec]:
    """The jobs to create: one, or one per sweep point; command-line overrides come last."""
    points = [RunPoint("run", config)] if sweep_cfg is None else sweep_points(sweep_cfg, config)
    return [JobSpec(name=f"{executor}-{point.name}".replace(".", "_"), executor=executor,
                    hardware=hardware, module=point.module,
                    args=(f"--config={point.config}",
                          f"--workdir={workdir.rstrip('/')}/{point.name}",
                          *point.overrides, *overrides))
            for point in points]


def define_flags() -> None:
    """Registers the launcher's flags (only when run as a program, so importing is harmless)."""
    flags.DEFINE_enum("executor", "local", ["local", "tpu", "gpu"], "Where the jobs run.")
    flags.DEFINE_string(
        "accelerator", None,
        "TPU slice (v4-8, v5e-16, v5p-32, v6e-64) or GPUs as KIND-COUNT (h100-16).")
    flags.DEFINE_integer("gpus_per_node", 8, "GPUs per node for --executor=gpu (A3: 8 H100).")
    flags.DEFINE_string("config", "configs/math_ppo.py",
                        "Training config string (file[:variant]).")
    flags.DEFINE_string("workdir", None, "Base directory; each run writes to WORKDIR/RUN_NAME.")
    flags.mark_flag_as_required("workdir")
    flags.DEFINE_string("sweep", None, "Sweep config file[:arg]; one job per configuration.")
    flags.DEFINE_string("experiment_title", "agentic_jax", "XManager experiment title.")
    flags.DEFINE_string("tpu_runtime_version", "v2-alpha-tpuv5", "TPU software version on GKE.")
    flags.DEFINE_string("base_image", "python:3.11-slim", "Container base image.")
    flags.DEFINE_bool("dry_run", False, "Print the jobs as JSON lines instead of launching them.")


def _parse_flags(argv: list[str]) -> list[str]:
    """absl parsing that lets --config.x=y overrides through: returns [argv0, *overrides]."""
    overrides = [arg for arg in argv[1:] if arg.startswith(_OVERRIDE_PREFIX)]
    rest = [arg for arg in argv if not arg.startswith(_OVERRIDE_PREFIX)]
    try:
        positional = FLAGS(rest)
    except flags.Error as err:
        sys.exit(f"xm_launch: {err}")
    if len(positional) > 1:
        sys.exit(f"xm_launch: unexpected arguments {positional[1:]}")
    return [argv[0], *overrides]


def _launch(jobs: Sequence[JobSpec], title: str) -> None:
    """Creates the XManager experiment with one work unit per job (all on the same hardware)."""
    from xmanager import xm, xm_local  # deferred: only launching needs the package

    executors = _xm_executors(jobs[0].hardware, jobs[0].executor, xm, xm_local)
    with xm_local.create_experiment(experiment_title=title) as experiment:
        [executable] = experiment.package([xm.python_container(
            executor_spec=executors[0].Spec(), path=str(_REPO_ROOT),
            entrypoint=xm.ModuleName(jobs[0].module), base_image=FLAGS.base_image)])
        for job in jobs:
            parts = {f"pool{i}": xm.Job(executable, executor, args=list(job.args))
                     for i, executor in enumerate(executors)}
            experiment.add(xm.JobGroup(**parts), identity=job.name)


def _xm_executors(hw: Hardware, executor: str, xm: Any, xm_local: Any) -> list[Any]:
    """XManager executors for one job; Vertex keeps a multi-node job's chief in its own pool."""
    if executor == "local":
        return [xm_local.Local()]
    if executor == "tpu":
        resource = getattr(xm.ResourceType, f"TPU_{hw.kind.upper()}")
        return [xm_local.Kubernetes(
            requirements=xm.JobRequirements({resource: hw.topology}, replicas=hw.hosts),
            tpu_capability=xm_local.TpuCapability(tpu_runtime_version=FLAGS.tpu_runtime_version))]
    gpus = {getattr(xm.ResourceType, hw.kind): hw.per_host}
    chief = xm_local.Vertex(requirements=xm.JobRequirements(gpus))
    if hw.hosts == 1:
        return [chief]
    return [chief, xm_local.Vertex(requirements=xm.JobRequirements(gpus, replicas=hw.hosts - 1))]


def main(argv: Sequence[str]) -> None:
    overrides = list(argv[1:])
    try:
        hardware = hardware_for(FLAGS.executor, FLAGS.accelerator, FLAGS.gpus_per_node)
        sweep_cfg = load_sweep(FLAGS.sweep) if FLAGS.sweep else None
        jobs = build_jobs(FLAGS.executor, hardware, FLAGS.config, FLAGS.workdir, overrides,
                          sweep_cfg)
    except ValueError as err:
        sys.exit(f"xm_launch: {err}")
    if FLAGS.dry_run:
        print(f"experiment {FLAGS.experiment_title!r}: {len(jobs)} job(s)")
        for job in jobs:
            print(job.to_json())
        return
    _launch(jobs, FLAGS.experiment_title)


if __name__ == "__main__":
    define_flags()
    app.run(main, flags_parser=_parse_flags)
