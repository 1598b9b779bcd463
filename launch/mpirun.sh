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
# `shardtrain train`: Ctrl-C / SIGTERM to this script reach the ranks at once, as SIGUSR1 / SIGUSR2
#   (mpirun forwards those; its own SIGINT / SIGTERM would SIGKILL the ranks 2 s later), so every
#   rank stops after a step, saves and prints the resume line (docs/launch.md "Stopping a run");
#   a second one is mpirun's SIGINT (the ranks end at once). mpirun then runs in a process group of
#   its own, stdin from /dev/null; the ranks exit 0 after a clean stop, this script 130 / 143.
# Everything after "--" is the command; options before it that this script does not know are
# passed to mpirun (e.g. --mca btl tcp,self).
set -euo pipefail

usage() { sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; }

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

if [[ "${cmd[1]:-}" != "train" ]]; then
  exec mpirun -np "$np" "${mpiargs[@]}" ${extra[@]+"${extra[@]}"} "${cmd[@]}"
fi
# train: the first INT / TERM passed on as USR1 / USR2 (see the header), a second as mpirun's INT
set -m  # mpirun in a process group of its own: a terminal's Ctrl-C reaches this script only
mpirun -np "$np" "${mpiargs[@]}" ${extra[@]+"${extra[@]}"} "${cmd[@]}" </dev/null &
job=$!
signals=0
first=0  # the first signal passed on (2 INT, 15 TERM)
pass_on() {  # pass_on USR1|USR2
  signals=$((signals + 1))
  [[ $signals -gt 1 ]] || first=$([[ $1 == USR1 ]] && echo 2 || echo 15)
  if [[ $signals -eq 1 ]]; then kill -"$1" "$job" 2>/dev/null; else kill -INT "$job" 2>/dev/null; fi
}
trap 'pass_on USR1' INT
trap 'pass_on USR2' TERM
set +e
while :; do
  wait "$job"
  rc=$?
  kill -0 "$job" 2>/dev/null || break  # a trapped signal interrupts wait; mpirun still runs
done
# the ranks exit 0 after a clean stop (launch/stop_signals.h): the job's code is the signal's
if [[ $rc -eq 0 && $signals -gt 0 ]]; then rc=$((128 + first)); fi
exit "$rc"
