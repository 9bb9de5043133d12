#!/usr/bin/env bash
# Train on a Cloud TPU VM slice: create it (directly or as a queued resource), put the project on
# every worker, run the same train command on all of them and stream their output here.
#
#   launch/tpu_vm.sh --name=rl-7b --zone=us-east5-a --accelerator-type=v5p-32 --spot \
#       --config=configs/math_ppo.py:qwen2.5-7b --workdir=gs://BUCKET/runs/rl-7b \
#       -- --config.training.lr=1e-5
#
# Every worker runs `python -m agentic_jax.train`; jax.distributed finds the other workers from
# the TPU metadata, so no coordinator flags are needed. The workdir must be shared by all workers
# (a gs:// bucket): checkpoints are written cooperatively. Arguments after `--` go to the trainer.
# --dry-run prints the commands (gcloud and tar) instead of running them.
set -euo pipefail

readonly REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Expanded by the workers' shells, not this one.
readonly REMOTE_DIR='$HOME/agentic_jax'

usage() {
  cat >&2 <<'EOF'
usage: launch/tpu_vm.sh --name=NAME --zone=ZONE --accelerator-type=TYPE --workdir=DIR
                        [options] [-- TRAIN_ARGS]
  --name=NAME               TPU VM (and queued resource) name
  --zone=ZONE               e.g. us-east5-a
  --accelerator-type=TYPE   v4-32, v5litepod-16, v5p-32, v6e-64, ...
  --workdir=DIR             shared run directory, e.g. gs://BUCKET/runs/NAME
  --config=CONFIG           training config string (default configs/math_ppo.py)
  --runtime-version=V       TPU software version (default chosen from the accelerator type)
  --project=PROJECT         gcloud project (default: gcloud's configured one)
  --spot                    spot capacity (cheaper, preemptible)
  --queued                  request a queued resource and wait until it is ACTIVE
  --pip=SPEC                pip-install SPEC on the workers (copying only configs/)
  --delete                  delete the TPU VM after training ends
  --dry-run                 print the commands instead of running them
EOF
  exit 2
}

die() { echo "tpu_vm.sh: $*" >&2; usage; }

name="" zone="" accelerator="" workdir="" config="configs/math_ppo.py" runtime="" project=""
spot=0 queued=0 pip_spec="" delete=0 dry_run=0
train_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --name=*) name="${1#*=}" ;;
    --zone=*) zone="${1#*=}" ;;
    --accelerator-type=*) accelerator="${1#*=}" ;;
    --workdir=*) workdir="${1#*=}" ;;
    --config=*) config="${1#*=}" ;;
    --runtime-version=*) runtime="${1#*=}" ;;
    --project=*) project="${1#*=}" ;;
    --pip=*) pip_spec="${1#*=}" ;;
    --spot) spot=1 ;;
    --queued) queued=1 ;;
    --delete) delete=1 ;;
    --dry-run) dry_run=1 ;;
    -h|--help) usage ;;
    --) shift; train_args=("$@"); break ;;
    *) die "unknown argument '$1'" ;;
  esac
  shift
done

[[ -n "$name" ]] || die "--name is required"
[[ -n "$zone" ]] || die "--zone is required"
[[ -n "$workdir" ]] || die "--workdir is required"
[[ "$accelerator" =~ ^(v4|v5litepod|v5e|v5p|v6e)-[0-9]+$ ]] \
  || die "--accelerator-type must look like v5p-32 (v4, v5litepod, v5e, v5p, v6e): '$accelerator'"

# The base software image each generation boots with unless --runtime-version says otherwise.
if [[ -z "$runtime" ]]; then
  case "${accelerator%%-*}" in
    v4) runtime="tpu-ubuntu2204-base" ;;
    v5litepod|v5e) runtime="v2-alpha-tpuv5-lite" ;;
    v5p) runtime="v2-alpha-tpuv5" ;;
    v6e) runtime="v2-alpha-tpuv6e" ;;
  esac
fi

common=(--zone="$zone")
[[ -n "$project" ]] && common+=(--project="$project")
spot_flag=()
[[ "$spot" == 1 ]] && spot_flag=(--spot)

# Runs a command, or with --dry-run prints it, shell-quoted, one per line.
run() {
  if [[ "$dry_run" == 1 ]]; then
    printf '%q ' "$@" | sed 's/ $//'
    echo
  else
    "$@"
  fi
}

on_all_workers() {
  run gcloud compute tpus tpu-vm ssh "$name" "${common[@]}" --worker=all --command="$1"
}

create_tpu() {
  if [[ "$queued" == 1 ]]; then
    run gcloud compute tpus queued-resources create "$name" "${common[@]}" --node-id="$name" \
      --accelerator-type="$accelerator" --runtime-version="$runtime" "${spot_flag[@]}"
    wait_until_active
  else
    run gcloud compute tpus tpu-vm create "$name" "${common[@]}" \
      --accelerator-type="$accelerator" --version="$runtime" "${spot_flag[@]}"
  fi
}

wait_until_active() {
  local describe=(gcloud compute tpus queued-resources describe "$name" "${common[@]}"
                  --format='value(state.state)')
  if [[ "$dry_run" == 1 ]]; then
    run "${describe[@]}"
    return
  fi
  local state=""
  until state="$("${describe[@]}")" && [[ "$state" == "ACTIVE" ]]; do
    if [[ "$state" == "FAILED" || "$state" == "SUSPENDED" ]]; then
      echo "tpu_vm.sh: queued resource $name is $state" >&2
      exit 1
    fi
    echo "queued resource $name: ${state:-unknown}; waiting" >&2
    sleep 30
  done
}

# Copies this checkout (or, with --pip, only its configs/) to every worker and installs it.
install_project() {
  local archive="/tmp/agentic_jax-$name.tar.gz" contents=.
  local install="pip install -e \"$REMOTE_DIR[tpu]\""
  if [[ -n "$pip_spec" ]]; then
    contents=configs
    install="pip install --upgrade $(printf '%q' "$pip_spec")"
  fi
  run tar -czf "$archive" --exclude=.git --exclude=.venv --exclude='__pycache__' \
    -C "$REPO_ROOT" "$contents"
  run gcloud compute tpus tpu-vm scp "$archive" "$name:agentic_jax.tar.gz" "${common[@]}" \
    --worker=all
  on_all_workers "mkdir -p \"$REMOTE_DIR\" && tar -xzf agentic_jax.tar.gz -C \"$REMOTE_DIR\" \
&& $install"
}

train() {
  local cmd=(python -m agentic_jax.train --config="$config" --workdir="$workdir"
             "${train_args[@]}")
  # --worker=all keeps one ssh per worker open, so every worker's output streams here.
  on_all_workers "cd \"$REMOTE_DIR\" && $(printf '%q ' "${cmd[@]}")2>&1 | tee -a ~/train.log"
}
create_tpu
install_project
train
if [[ "$delete" == 1 ]]; then
  run gcloud compute tpus tpu-vm delete "$name" "${common[@]}" --quiet
fi
