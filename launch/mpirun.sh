#!/usr/bin/env bash
# mpirun wrapper: N CPU ranks, or one rank per GPU, with the Open MPI settings this needs.
#
#   launch/mpirun.sh -n 2 -- shardtrain train --config launch/configs/demo.yaml
#   launch/mpirun.sh --gpus -- shardtrain train --config launch/configs/gpt2-124m.yaml
#   launch/mpirun.sh -n 8 --gpus --hostfile hosts -- shardtrain train ...   (hosts: "node1 slots=4")
#
# CPU (default): N ranks on this machine, oversubscribed when N > cores, not bound to cores.
# --gpus: N defaults to the visible GPU count (nvidia-smi -L); ranks are mapped by slot so the
#   ranks of a node are consecutive, and `--device cuda` is added to `shardtrain train|sample|generate`
#   unless a --device is given. Each rank uses the GPU of its node-local rank (comm/ finds it with
#   an MPI shared-memory split; OMPI_COMM_WORLD_LOCAL_RANK / SLURM_LOCALID are cross-checked).
#   Every rank sees every GPU (no CUDA_VISIBLE_DEVICES per rank): NCCL needs that for P2P/NVLink.
#   NCCL_NVLS_ENABLE=0 (NVLink SHARP multicast off; see docs/launch.md) unless already set.
# "shardtrain" as the command means this checkout's build (SHARDTRAIN_BIN, else build/shardtrain)
# when it is not on PATH. As root, --allow-run-as-root and OMPI_ALLOW_RUN_AS_ROOT* are set.
# A job's error is its one line: the ranks get OMPI_MCA_orte_execute_quiet=1, so MPI_Abort's
#   7-line "MPI_ABORT was invoked" banner (and the ORTE_ERROR_LOG show_help.c lines of a rank
#   killed while sending it) stay unprinted; mpirun's own messages (a program it cannot start, a
#   rank killed by a signal) still print. SHARDTRAIN_MPI_QUIET=0 gives the ranks Open MPI's
#   messages back.
# Everything after "--" is the command; options before it that this script does not know are
# passed to mpirun (e.g. --mca btl tcp,self).
set -euo pipefail

usage() { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; }

np=""
gpus=0
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -n|-np|--np) np="$2"; shift 2 ;;
    --gpus) gpus=1; shift ;;
    --hostfile) extra+=(--hostfile "$2"); shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) extra+=("$1"); shift ;;
  esac
done
[[ $# -gt 0 ]] || { echo "mpirun.sh: no command after '--' (try --help)" >&2; exit 2; }
cmd=("$@")

root="$(cd "$(dirname "$0")/.." && pwd)"
if [[ "${cmd[0]}" == "shardtrain" ]] && ! command -v shardtrain >/dev/null 2>&1; then
  cmd[0]="${SHARDTRAIN_BIN:-$root/build/shardtrain}"
  [[ -x "${cmd[0]}" ]] || { echo "mpirun.sh: ${cmd[0]} not found (build first, or set SHARDTRAIN_BIN)" >&2; exit 2; }
fi

mpiargs=()
if [[ $gpus -eq 1 ]]; then
  if [[ -z "$np" ]]; then
    np=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    [[ "$np" -gt 0 ]] || { echo "mpirun.sh: --gpus but nvidia-smi lists no GPU; give -n N" >&2; exit 2; }
  fi
  export NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}"
  mpiargs+=(--map-by slot --bind-to none -x NCCL_NVLS_ENABLE)
  for v in NCCL_DEBUG NCCL_SOCKET_IFNAME NCCL_IB_DISABLE NCCL_P2P_DISABLE CUDA_VISIBLE_DEVICES; do
    [[ -n "${!v:-}" ]] && mpiargs+=(-x "$v")
  done
  sub="${cmd[1]:-}"
  if [[ "$sub" == "train" || "$sub" == "sample" || "$sub" == "generate" ]]; then
    has_device=0
    for a in "${cmd[@]}"; do [[ "$a" == "--device" ]] && has_device=1; done
    [[ $has_device -eq 1 ]] || cmd+=(--device cuda)
  fi
else
  np="${np:-2}"
  mpiargs+=(--oversubscribe --bind-to none)
fi
[[ "$np" =~ ^[0-9]+$ && "$np" -ge 1 ]] || { echo "mpirun.sh: -n needs a positive count, got '$np'" >&2; exit 2; }

if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  mpiargs+=(--allow-run-as-root)
fi
# quiet on the ranks only (-x VAR=value is not mpirun's own environment): see the header
[[ "${SHARDTRAIN_MPI_QUIET:-1}" == "0" ]] || mpiargs+=(-x OMPI_MCA_orte_execute_quiet=1)
for v in SHARDTRAIN_PROGRESS SHARDTRAIN_COMM_DEBUG; do
  [[ -n "${!v:-}" ]] && mpiargs+=(-x "$v")
done

exec mpirun -np "$np" "${mpiargs[@]}" ${extra[@]+"${extra[@]}"} "${cmd[@]}"
