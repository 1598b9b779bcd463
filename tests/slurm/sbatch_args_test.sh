#!/usr/bin/env bash
# The launcher lines of launch/slurm/train_1node.sbatch and train_multinode.sbatch, without Slurm:
# each script runs as a plain bash script with the variables sbatch would set and with `srun` /
# `mpirun` stubs on PATH that print their arguments. Checks, for both scripts:
#   - srun gets --cpus-per-task=$SLURM_CPUS_PER_TASK (Slurm >= 22.05 no longer passes the job's
#     value to srun), and no --cpus-per-task when the job has none;
#   - srun: --mpi=pmix --ntasks=$SLURM_NTASKS, the binary, `train` and the user's arguments, with
#     --device added by the script's rules;
#   - mpirun: -np $SLURM_NTASKS (multinode: --map-by ppr:$SLURM_NTASKS_PER_NODE:node) and the NCCL
#     variables exported with -x.
# usage: sbatch_args_test.sh REPO_ROOT
set -uo pipefail
REPO="${1:?usage: sbatch_args_test.sh REPO_ROOT}"
T=$(mktemp -d "${TMPDIR:-/tmp}/st-sbatch-args.XXXXXX")
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/bin"
for tool in srun mpirun; do
  printf '#!/bin/sh\nprintf "%%s\\n" "%s" "$@"\n' "$tool" >"$T/bin/$tool"
done
printf '#!/bin/sh\nexit 0\n' >"$T/shardtrain"
chmod +x "$T"/bin/* "$T/shardtrain"
fails=0
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# launch SCRIPT [VAR=VALUE...] -- ARGS... → $argv: the launcher's argv, one per line
launch() {
  local script="$1"; shift
  local vars=()
  while [[ "$1" != "--" ]]; do vars+=("$1"); shift; done
  shift
  argv=$(cd "$T" && env -i PATH="$T/bin:/usr/bin:/bin" HOME="$T" SLURM_SUBMIT_DIR="$T" SLURM_JOB_ID=7 \
    SHARDTRAIN_BIN="$T/shardtrain" "${vars[@]}" bash "$REPO/launch/slurm/$script" "$@" 2>"$T/err" | grep -v '^train_')
  [[ -s "$T/err" ]] && bad "$script ${vars[*]}: stderr: $(cat "$T/err")"
}
has() { grep -qx -- "$1" <<<"$argv"; }
count() { grep -cx -- "$1" <<<"$argv"; }

for script in train_1node.sbatch train_multinode.sbatch; do
  # srun, a job with --cpus-per-task=8
  launch "$script" SLURM_NTASKS=16 SLURM_NTASKS_PER_NODE=8 SLURM_CPUS_PER_TASK=8 SLURM_GPUS_ON_NODE=8 \
    -- --config c.yaml --steps 3
  [[ "$(head -n 1 <<<"$argv")" == srun ]] || bad "$script: launcher is not srun: $argv"
  for want in --mpi=pmix --ntasks=16 --cpus-per-task=8 --kill-on-bad-exit=1 --gpu-bind=none "$T/shardtrain" train; do
    has "$want" || bad "$script: srun line lacks $want: $(tr '\n' ' ' <<<"$argv")"
  done
  [[ "$(sed -n '/^train$/,$p' <<<"$argv" | tr '\n' ' ')" == "train --config c.yaml --steps 3 --device cuda " ]] ||
    bad "$script: arguments after 'train' are $(sed -n '/^train$/,$p' <<<"$argv" | tr '\n' ' ')"
  # srun, a job without --cpus-per-task: srun gets none; the user's --device is kept
  launch "$script" SLURM_NTASKS=2 -- --device cpu
  [[ $(grep -c -- '--cpus-per-task' <<<"$argv") -eq 0 ]] || bad "$script: --cpus-per-task without SLURM_CPUS_PER_TASK"
  [[ $(count --device) -eq 1 ]] && has cpu || bad "$script: the user's --device cpu was not kept alone: $(tr '\n' ' ' <<<"$argv")"
  # mpirun
  launch "$script" ST_LAUNCHER=mpirun SLURM_NTASKS=16 SLURM_NTASKS_PER_NODE=8 SLURM_CPUS_PER_TASK=8 -- --steps 3
  [[ "$(head -n 1 <<<"$argv")" == mpirun ]] || bad "$script: launcher is not mpirun: $argv"
  grep -qx -- '-np' <<<"$argv" && [[ "$(grep -A1 -x -- '-np' <<<"$argv" | tail -n 1)" == 16 ]] ||
    bad "$script: mpirun lacks -np 16: $(tr '\n' ' ' <<<"$argv")"
  [[ "$(grep -A1 -x -- '-x' <<<"$argv" | grep -c NCCL_NVLS_ENABLE)" -eq 1 ]] || bad "$script: NCCL_NVLS_ENABLE not exported with -x"
done
launch train_multinode.sbatch ST_LAUNCHER=mpirun SLURM_NTASKS=16 SLURM_NTASKS_PER_NODE=8 -- --steps 3
[[ "$(grep -A1 -x -- '--map-by' <<<"$argv" | tail -n 1)" == "ppr:8:node" ]] ||
  bad "train_multinode: mpirun lacks --map-by ppr:8:node: $(tr '\n' ' ' <<<"$argv")"
# Outside sbatch: a one-line error, exit 2 (the stubs are not reached).
for script in train_1node.sbatch train_multinode.sbatch; do
  (cd "$T" && env -i PATH="$T/bin:/usr/bin:/bin" SHARDTRAIN_BIN="$T/shardtrain" bash "$REPO/launch/slurm/$script") >/dev/null 2>"$T/err"
  rc=$?
  [[ $rc -ne 0 && "$(cat "$T/err")" == *"run under sbatch"* ]] || bad "$script outside sbatch: rc=$rc, $(cat "$T/err")"
done
[[ $fails -eq 0 ]] && echo "sbatch launcher lines: all checks passed" || exit 1
