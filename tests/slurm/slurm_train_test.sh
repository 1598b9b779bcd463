#!/usr/bin/env bash
# The `slurm` ctest: a REAL one-node Slurm cluster on this machine, built in a temporary
# directory and torn down at the end, that runs launch/slurm/train_1node.sbatch twice (launcher
# srun --mpi=pmix, then mpirun), each a 2-task CPU job training a tiny GPT on the built-in corpus
# for a few steps. Passes when both jobs end COMPLETED with exit code 0:0 and each metrics JSONL
# has one line per step with finite losses, and the final checkpoint's state.json says dp = 2
# (the two tasks formed one job).
#
# Cluster: munged (own key and socket), slurmctld and slurmd (NodeName=localhost, CPUs=2,
# loopback, free ports, select/cons_tres, proctrack/linuxproc, task/none: no cgroups), all as
# root, each under `timeout` so nothing outlives the test even if the EXIT trap is skipped.
# Any failure to start is a FAILURE with the daemons' logs, never a skip: a machine without
# Slurm does not pass this test.
#
# usage: slurm_train_test.sh SHARDTRAIN_BIN REPO_ROOT [STEPS]
# env:   ST_SLURM_KEEP=1 keeps the temporary directory; ST_SLURM_DEADLINE (s, default 240).
set -uo pipefail

BIN="${1:?usage: slurm_train_test.sh SHARDTRAIN_BIN REPO_ROOT [STEPS]}"
REPO="${2:?usage: slurm_train_test.sh SHARDTRAIN_BIN REPO_ROOT [STEPS]}"
STEPS="${3:-4}"
DEADLINE="${ST_SLURM_DEADLINE:-240}"
START=$(date +%s)

fail() {
  echo "SLURM TEST FAILED: $*" >&2
  for f in "$D"/*.log "$D"/*.out; do
    [[ -f "$f" ]] && { echo "---- $f (last 30 lines)" >&2; tail -n 30 "$f" >&2; }
  done
  exit 1
}

for tool in munged mungekey slurmctld slurmd sbatch scontrol sinfo python3; do
  command -v "$tool" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin" command -v "$tool" >/dev/null 2>&1 ||
    { echo "SLURM TEST FAILED: '$tool' not found: run launch/setup.sh (installs slurm-wlm and munge)" >&2; exit 1; }
done
export PATH="$PATH:/usr/sbin"
[[ $(id -u) -eq 0 ]] || { echo "SLURM TEST FAILED: must run as root (slurmd runs jobs as root here)" >&2; exit 1; }
[[ -x "$BIN" ]] || { echo "SLURM TEST FAILED: $BIN is not built" >&2; exit 1; }

D=$(mktemp -d /tmp/st-slurm.XXXXXX)
chmod 755 "$D"
cleanup() {
  for f in slurmd slurmctld munged; do
    p=$(cat "$D/$f.pid" 2>/dev/null || true)
    [[ -n "$p" ]] && kill "$p" 2>/dev/null
  done
  sleep 1
  for f in slurmd slurmctld munged; do
    p=$(cat "$D/$f.pid" 2>/dev/null || true)
    [[ -n "$p" ]] && kill -9 "$p" 2>/dev/null
  done
  [[ "${ST_SLURM_KEEP:-0}" == "1" ]] && echo "kept $D" || rm -rf "$D"
}
trap cleanup EXIT

left() { echo $((DEADLINE - ($(date +%s) - START))); }

# ---- munge --------------------------------------------------------------------------------
mungekey -c -k "$D/munge.key" >/dev/null 2>&1 || dd if=/dev/urandom of="$D/munge.key" bs=1024 count=1 2>/dev/null
chmod 600 "$D/munge.key"
timeout "$DEADLINE" munged -F -f --key-file="$D/munge.key" --socket="$D/munge.sock" --pid-file="$D/munged.pid" \
  --log-file="$D/munged.log" --seed-file="$D/munged.seed" > "$D/munged.out" 2>&1 &
for _ in $(seq 50); do [[ -S "$D/munge.sock" ]] && break; sleep 0.1; done
[[ -S "$D/munge.sock" ]] || fail "munged did not create its socket"
munge -S "$D/munge.sock" -n | unmunge -S "$D/munge.sock" >/dev/null 2>&1 || fail "munge credential round trip failed"

# ---- slurm.conf ---------------------------------------------------------------------------
read -r CTLD_PORT SLURMD_PORT < <(python3 -c '
import socket
s=[socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
mkdir -p "$D/state" "$D/spool"
touch "$D/plugstack.conf"
cat > "$D/slurm.conf" <<CONF
ClusterName=shardtrain-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$D/munge.sock
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd.log
PlugStackConfig=$D/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
MinJobAge=600
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MailProg=/bin/true
NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$D/slurm.conf"

# ---- daemons ------------------------------------------------------------------------------
(cd "$D" && exec timeout "$DEADLINE" slurmctld -D -i -f "$D/slurm.conf" > "$D/slurmctld.out" 2>&1) &
(cd "$D" && exec timeout "$DEADLINE" slurmd -D -N localhost -f "$D/slurm.conf" > "$D/slurmd.out" 2>&1) &
up=0
for _ in $(seq 60); do
  if sinfo -h -n localhost -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then up=1; break; fi
  sleep 0.5
done
[[ $up -eq 1 ]] || fail "slurmctld + slurmd did not bring node 'localhost' to idle within 30 s ($(sinfo -h -o '%T %E' 2>&1 | head -1))"
echo "cluster up: slurmctld :$CTLD_PORT, slurmd :$SLURMD_PORT, $(sinfo -h -o '%P %D %T %c CPUs')"

# ---- jobs ---------------------------------------------------------------------------------
submit() {  # launcher → job id
  local launcher="$1"
  sbatch --parsable --ntasks=2 --ntasks-per-node=2 --cpus-per-task=1 --time=5 --chdir="$REPO" \
    --output="$D/job-$launcher.out" --job-name="st-$launcher" \
    --export=ALL,SHARDTRAIN_BIN="$BIN",ST_LAUNCHER="$launcher",SHARDTRAIN_PROGRESS=0,OMPI_MCA_rmaps_base_oversubscribe=1 \
    "$REPO/launch/slurm/train_1node.sbatch" \
    --model gpt --layers 1 --d-model 32 --heads 2 --vocab 256 --seq-len 32 --micro-batch 2 --grad-accum 1 \
    --steps "$STEPS" --lr 0.003 --log-every 1 --progress 0 --checkpoint-dir "$D/ckpt-$launcher" --checkpoint-every 0 \
    --metrics "$D/metrics-$launcher.jsonl" --timeout-s 60
}
declare -A JOB
for l in srun mpirun; do
  JOB[$l]=$(submit "$l") || fail "sbatch ($l) was refused"
  echo "submitted job ${JOB[$l]} (launcher $l)"
done

state_of() { scontrol show job "$1" 2>/dev/null | grep -oE 'JobState=[A-Z_]+' | cut -d= -f2; }
for l in srun mpirun; do
  id=${JOB[$l]}
  while :; do
    st=$(state_of "$id")
    case "$st" in
      COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED) break ;;
    esac
    [[ $(left) -gt 5 ]] || { scancel "$id" 2>/dev/null; fail "job $id ($l) still '$st' at the deadline of ${DEADLINE} s"; }
    sleep 1
  done
  ec=$(scontrol show job "$id" | grep -oE ' ExitCode=[0-9]+:[0-9]+' | cut -d= -f2)
  echo "job $id ($l): $st, exit code $ec"
  [[ "$st" == "COMPLETED" && "$ec" == "0:0" ]] || fail "job $id ($l) ended $st with exit code $ec"
  python3 - "$D/metrics-$l.jsonl" "$STEPS" "$D/ckpt-$l" <<'PY' || fail "metrics or checkpoint of job $id ($l) are wrong"
import json, math, os, sys
path, steps, ckpt = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lines = [l for l in open(path) if l.strip()]
assert len(lines) == steps, f"{path}: {len(lines)} lines, expected {steps} (one per step, written by rank 0 only)"
rows = [json.loads(l) for l in lines]
assert [r["step"] for r in rows] == list(range(1, steps + 1)), f"steps {[r['step'] for r in rows]}"
for r in rows:
    assert isinstance(r["loss"], (int, float)) and math.isfinite(r["loss"]), f"loss {r['loss']}"
    assert 0 < r["loss"] < 10, f"loss {r['loss']} out of range for a 256-token vocabulary"
# One 2-rank job, not two 1-rank jobs: the final checkpoint's layout has dp = 2.
state = json.load(open(os.path.join(ckpt, f"step_{steps:08d}", "state.json")))
assert state["step"] == steps, f"checkpoint step {state['step']}"
assert state["layout"]["dp"] == 2, f"checkpoint layout {state['layout']}: the 2 tasks did not form one dp=2 job"
print(f"{path}: {steps} steps, loss {rows[0]['loss']:.4f} -> {rows[-1]['loss']:.4f}")
PY
  grep -q "launcher $l" "$D/job-$l.out" || fail "job $id output lacks the launcher line"
done
echo "slurm test passed in $(( $(date +%s) - START )) s"
