#!/usr/bin/env bash
# The multi-node `slurm` ctest: a REAL two-node Slurm cluster on this machine that runs
# launch/slurm/train_multinode.sbatch twice (launcher srun --mpi=pmix, then mpirun), each a job
# of 2 nodes × 1 task × 2 CPUs training a tiny GPT on the CPU for a few steps. Passes when both
# jobs end COMPLETED 0:0 on nodes n[1-2], rank 0 reports one rank per node (the MPI shared-memory
# split: the ranks ran under different slurmds), the final checkpoint says dp = 2, and each job's
# losses equal one process's on the same global batch (--grad-accum 2) to 1e-5. Then two jobs of
# launch/supervise.sh --launcher srun: rank 1 SIGKILLed at the last step, relaunched inside the
# allocation from the checkpoint before it, on 2 tasks (losses = the srun job's bit for bit) and,
# with --min-ranks 1, on 1 (= one process's to 1e-5); about 10 s more.
#
# Nodes: two network namespaces (ip netns) joined by a bridge, 10.213.X.0/24: slurmctld in this
# namespace at .1, slurmd n1 at .2 and n2 at .3, each under its own UTS namespace (hostname n1,
# n2) and mount namespace, where the node's own directory is bound over $D/node: SlurmdSpoolDir
# and PMIx's client directory (mpi.conf) are one path in slurm.conf but a different directory on
# each node, as on real nodes (PMIx addresses a peer's socket by that path). munged is shared
# (one key, one socket file). Every daemon runs under `timeout`; the EXIT trap kills them and
# removes the namespaces and the bridge. Needs root with CAP_NET_ADMIN and CAP_SYS_ADMIN,
# iproute2, slurm-wlm, munge; a machine that lacks them FAILS this test (with the cause), as the
# one-node test does.
#
# usage: slurm_multinode_test.sh SHARDTRAIN_BIN REPO_ROOT [STEPS]
# env:   ST_SLURM_KEEP=1 keeps the temporary directory; ST_SLURM_DEADLINE (s, default 180).
set -uo pipefail

BIN="${1:?usage: slurm_multinode_test.sh SHARDTRAIN_BIN REPO_ROOT [STEPS]}"
REPO="${2:?usage: slurm_multinode_test.sh SHARDTRAIN_BIN REPO_ROOT [STEPS]}"
STEPS="${3:-3}"
DEADLINE="${ST_SLURM_DEADLINE:-180}"
START=$(date +%s)
export PATH="$PATH:/usr/sbin:/sbin"
D=""

fail() {
  echo "SLURM MULTINODE TEST FAILED: $*" >&2
  for f in "$D"/*.log "$D"/*.out; do
    [[ -f "$f" ]] && { echo "---- $f (last 20 lines)" >&2; tail -n 20 "$f" >&2; }
  done
  exit 1
}

for tool in ip nsenter unshare munged mungekey slurmctld slurmd sbatch scontrol sinfo python3; do
  command -v "$tool" >/dev/null 2>&1 ||
    fail "'$tool' not found: run launch/setup.sh (installs slurm-wlm, munge, iproute2)"
done
[[ $(id -u) -eq 0 ]] || fail "must run as root (network namespaces; slurmd runs jobs as root here)"
[[ -x "$BIN" ]] || fail "$BIN is not built"

# Names carry this shell's pid; namespaces and bridges left by a killed run are removed first.
for ns in $(ip netns list 2>/dev/null | grep -oE '^st-n[12]-[0-9]+'); do
  kill -0 "${ns##*-}" 2>/dev/null || ip netns del "$ns" 2>/dev/null
done
for br in $(ip -o link show type bridge 2>/dev/null | grep -oE 'stbr[0-9]+'); do
  kill -0 "${br#stbr}" 2>/dev/null || ip link del "$br" 2>/dev/null
done
P=$$
X=$((P % 200 + 20))
while ip -4 addr | grep -q "10\.213\.$X\."; do X=$(((X + 1) % 200 + 20)); done
NET="10.213.$X"
BR="stbr$P"
NS=("st-n1-$P" "st-n2-$P")

D=$(mktemp -d /tmp/st-slurm-mn.XXXXXX)
chmod 755 "$D"
cleanup() {
  local f p
  for f in "$D"/*.pid; do p=$(cat "$f" 2>/dev/null); [[ -n "$p" ]] && kill "$p" 2>/dev/null; done
  sleep 1
  for f in "$D"/*.pid; do p=$(cat "$f" 2>/dev/null); [[ -n "$p" ]] && kill -9 "$p" 2>/dev/null; done
  for f in "${NS[@]}"; do ip netns del "$f" 2>/dev/null; done
  ip link del "$BR" 2>/dev/null
  [[ "${ST_SLURM_KEEP:-0}" == "1" ]] && echo "kept $D" || rm -rf "$D"
}
trap cleanup EXIT
left() { echo $((DEADLINE - ($(date +%s) - START))); }

# ---- network: a bridge here, one veth into each node's namespace -------------------------------
ip link add "$BR" type bridge 2>"$D/ip.out" && ip addr add "$NET.1/24" dev "$BR" && ip link set "$BR" up ||
  fail "cannot create bridge $BR (needs CAP_NET_ADMIN): $(cat "$D/ip.out")"
for i in 1 2; do
  ns=${NS[$((i - 1))]}
  { ip netns add "$ns" && ip link add "stv${i}h$P" type veth peer name "stv${i}n$P" &&
    ip link set "stv${i}h$P" master "$BR" up && ip link set "stv${i}n$P" netns "$ns" &&
    ip -n "$ns" link set lo up && ip -n "$ns" addr add "$NET.$((i + 1))/24" dev "stv${i}n$P" &&
    ip -n "$ns" link set "stv${i}n$P" up; } 2>>"$D/ip.out" ||
    fail "cannot create network namespace $ns (needs CAP_SYS_ADMIN and CAP_NET_ADMIN): $(cat "$D/ip.out")"
done

# ---- munge ------------------------------------------------------------------------------------
mungekey -c -k "$D/munge.key" >/dev/null 2>&1 || dd if=/dev/urandom of="$D/munge.key" bs=1024 count=1 2>/dev/null
chmod 600 "$D/munge.key"
timeout "$DEADLINE" munged -F -f --key-file="$D/munge.key" --socket="$D/munge.sock" --pid-file="$D/munged.pid" \
  --log-file="$D/munged.log" --seed-file="$D/munged.seed" >"$D/munged.out" 2>&1 &
for _ in $(seq 50); do [[ -S "$D/munge.sock" ]] && break; sleep 0.1; done
[[ -S "$D/munge.sock" ]] || fail "munged did not create its socket"

# ---- slurm.conf -------------------------------------------------------------------------------
CTLD_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
mkdir -p "$D/state" "$D/node" "$D/n1/spool" "$D/n1/pmix" "$D/n2/spool" "$D/n2/pmix"
touch "$D/plugstack.conf"
echo "PMIxCliTmpDirBase=$D/node/pmix" >"$D/mpi.conf"
cat >"$D/slurm.conf" <<CONF
ClusterName=shardtrain-mn
SlurmctldHost=$(hostname -s)($NET.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$D/munge.sock
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/node/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd-%n.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd-%n.log
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
NodeName=n1 NodeAddr=$NET.2 NodeHostname=n1 CPUs=2 State=UNKNOWN
NodeName=n2 NodeAddr=$NET.3 NodeHostname=n2 CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$D/slurm.conf"

# ---- daemons ----------------------------------------------------------------------------------
(cd "$D" && exec timeout "$DEADLINE" slurmctld -D -i -f "$D/slurm.conf" >"$D/slurmctld.out" 2>&1) &
for i in 1 2; do
  (cd "$D" && exec nsenter --net="/run/netns/${NS[$((i - 1))]}" unshare --uts --mount --propagation private \
     sh -c "mount --bind '$D/n$i' '$D/node' && hostname n$i && exec timeout '$DEADLINE' slurmd -D -N n$i -f '$D/slurm.conf'" \
     >"$D/slurmd-n$i.out" 2>&1) &
done
up=0
for _ in $(seq 60); do
  [[ "$(timeout 5 sinfo -h -o '%D %T' 2>/dev/null)" == "2 idle" ]] && { up=1; break; }
  sleep 0.5
done
[[ $up -eq 1 ]] || fail "nodes n1, n2 not idle within 30 s ($(timeout 5 sinfo -h -N -o '%N %T %E' 2>&1 | tr '\n' ' '))"
echo "cluster up: slurmctld $NET.1:$CTLD_PORT, slurmd n1 $NET.2, n2 $NET.3"

# ---- the reference: one process, the same global batch (2 ranks × micro-batch 2 = 2 × 2 accumulated)
MODEL=(--model gpt --layers 1 --d-model 32 --heads 2 --vocab 256 --seq-len 32 --micro-batch 2 --steps "$STEPS"
       --lr 0.003 --log-every 1 --progress 0 --checkpoint-every 0 --timeout-s 60)
SHARDTRAIN_PROGRESS=0 "$BIN" train "${MODEL[@]}" --grad-accum 2 --device cpu --checkpoint-dir "$D/ckpt-ref" \
  --metrics "$D/metrics-ref.jsonl" >"$D/ref.out" 2>&1 || fail "the one-process reference run failed"

# ---- jobs -------------------------------------------------------------------------------------
declare -A JOB
for l in srun mpirun; do
  JOB[$l]=$(sbatch --parsable --nodes=2 --ntasks-per-node=1 --cpus-per-task=2 --gpus-per-node=0 --time=5 \
    --chdir="$REPO" --output="$D/job-$l.out" --job-name="st-mn-$l" \
    --export=ALL,SHARDTRAIN_BIN="$BIN",ST_LAUNCHER="$l",ST_DEVICE=cpu,SHARDTRAIN_PROGRESS=0,OMPI_MCA_btl_tcp_if_include="$NET.0/24",OMPI_MCA_oob_tcp_if_include="$NET.0/24" \
    "$REPO/launch/slurm/train_multinode.sbatch" "${MODEL[@]}" --grad-accum 1 \
    --checkpoint-dir "$D/ckpt-$l" --metrics "$D/metrics-$l.jsonl" 2>"$D/sbatch-$l.out") ||
    fail "sbatch ($l) was refused: $(cat "$D/sbatch-$l.out")"
  echo "submitted job ${JOB[$l]} (launcher $l)"
done

for l in srun mpirun; do
  id=${JOB[$l]}
  while :; do
    info=$(timeout 5 scontrol show job "$id" 2>/dev/null)
    st=$(grep -oE 'JobState=[A-Z_]+' <<<"$info" | cut -d= -f2)
    case "$st" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED) break ;; esac
    [[ $(left) -gt 5 ]] || { scancel "$id" 2>/dev/null; fail "job $id ($l) still '$st' at the deadline of $DEADLINE s"; }
    sleep 1
  done
  ec=$(grep -oE ' ExitCode=[0-9]+:[0-9]+' <<<"$info" | cut -d= -f2)
  nodes=$(grep -oE '^ *NodeList=[^ ]+' <<<"$info" | head -n 1 | cut -d= -f2)
  echo "job $id ($l): $st, exit code $ec, nodes $nodes"
  [[ "$st" == "COMPLETED" && "$ec" == "0:0" ]] || fail "job $id ($l) ended $st with exit code $ec"
  [[ "$nodes" == "n[1-2]" ]] || fail "job $id ($l) ran on '$nodes', not n[1-2]"
  grep -q "local rank 0 of 1 " "$D/job-$l.out" ||
    fail "job $id ($l): rank 0 does not report one rank per node: $(grep -m1 '^layout' "$D/job-$l.out")"
  python3 - "$D/metrics-$l.jsonl" "$D/metrics-ref.jsonl" "$STEPS" "$D/ckpt-$l" <<'PY' || fail "metrics or checkpoint of job $id ($l) are wrong"
import json, math, os, sys
path, ref_path, steps, ckpt = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rows = [json.loads(l) for l in open(path) if l.strip()]
ref = [json.loads(l) for l in open(ref_path) if l.strip()]
assert [r["step"] for r in rows] == list(range(1, steps + 1)), f"{path}: steps {[r['step'] for r in rows]}"
assert len(ref) == steps, f"reference: {len(ref)} lines"
# Two ranks averaging their gradients vs one process accumulating the same 2 micro-batches: the
# same sums in another order, f32 — 1e-5 relative is ~100 ulp of the loss.
for r, q in zip(rows, ref):
    assert math.isfinite(r["loss"]), f"step {r['step']}: loss {r['loss']}"
    assert abs(r["loss"] - q["loss"]) <= 1e-5 * abs(q["loss"]), f"step {r['step']}: loss {r['loss']} vs one process {q['loss']}"
state = json.load(open(os.path.join(ckpt, f"step_{steps:08d}", "state.json")))
assert state["layout"]["dp"] == 2, f"checkpoint layout {state['layout']}: not one dp=2 job"
print(f"{path}: {steps} steps, loss {rows[0]['loss']:.6f} -> {rows[-1]['loss']:.6f} (one process: {ref[-1]['loss']:.6f})")
PY
done

# ---- launch/supervise.sh inside the allocation: rank 1 (on n2) SIGKILLs itself at the last step;
# the supervisor relaunches with srun --mpi=pmix in the same allocation, from the checkpoint of
# step STEPS-1: on both nodes ("same": the losses equal the srun job's bit for bit, same layout),
# and with --min-ranks 1 --ranks-cmd 'echo 1' on one task ("fewer": the planner's dp 1 x
# grad-accum 2 = the one-process reference's layout, within its 1e-5)
declare -A SUP
for v in same fewer; do
  extra=""
  [[ $v == fewer ]] && extra="--min-ranks 1 --ranks-cmd 'echo 1'"
  SUP[$v]=$(sbatch --parsable --nodes=2 --ntasks-per-node=1 --cpus-per-task=2 --gpus-per-node=0 --time=5 \
    --chdir="$REPO" --output="$D/job-sup-$v.out" --job-name="st-mn-sup-$v" \
    --export=ALL,SHARDTRAIN_PROGRESS=0,SHARDTRAIN_TEST_KILL_STEP="$STEPS",SHARDTRAIN_TEST_KILL_RANK=1,SHARDTRAIN_TEST_KILL_MARK="$D/killed-$v",OMPI_MCA_btl_tcp_if_include="$NET.0/24",OMPI_MCA_oob_tcp_if_include="$NET.0/24" \
    --wrap="$REPO/launch/supervise.sh --launcher srun --mpi=pmix --cpu-bind=none --report $D/sup-$v.jsonl $extra -- $BIN train ${MODEL[*]} --grad-accum 1 --device cpu --checkpoint-every $((STEPS - 1)) --checkpoint-dir $D/ckpt-sup-$v --metrics $D/metrics-sup-$v.jsonl" \
    2>"$D/sbatch-sup-$v.out") || fail "sbatch (supervise $v) was refused: $(cat "$D/sbatch-sup-$v.out")"
  echo "submitted job ${SUP[$v]} (launch/supervise.sh, $v)"
done
for v in same fewer; do
  id=${SUP[$v]}
  while :; do
    info=$(timeout 5 scontrol show job "$id" 2>/dev/null)
    st=$(grep -oE 'JobState=[A-Z_]+' <<<"$info" | cut -d= -f2)
    case "$st" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED) break ;; esac
    [[ $(left) -gt 5 ]] || { scancel "$id" 2>/dev/null; fail "job $id (supervise $v) still '$st' at the deadline of $DEADLINE s"; }
    sleep 1
  done
  ec=$(grep -oE ' ExitCode=[0-9]+:[0-9]+' <<<"$info" | cut -d= -f2)
  echo "job $id (supervise $v): $st, exit code $ec"
  grep '^supervise: ' "$D/job-sup-$v.out"
  [[ "$st" == "COMPLETED" && "$ec" == "0:0" ]] || fail "job $id (supervise $v) ended $st with exit code $ec"
  [[ -s "$D/killed-$v" ]] || fail "job $id (supervise $v): the seam killed no rank"
  ranks=2
  [[ $v == fewer ]] && ranks=1
  python3 - "$D/metrics-sup-$v.jsonl" "$D/metrics-srun.jsonl" "$D/metrics-ref.jsonl" "$STEPS" "$D/sup-$v.jsonl" "$ranks" \
    "$D/killed-$v" <<'PY' || fail "job $id (supervise $v): metrics or restart report wrong"
import json, sys
path, srun_path, ref_path, steps, report, ranks, killed = sys.argv[1:8]
steps, ranks = int(steps), int(ranks)
rows = [json.loads(l) for l in open(path) if l.strip()]
assert [r["step"] for r in rows] == list(range(1, steps + 1)), f"{path}: steps {[r['step'] for r in rows]}"
rep = [json.loads(l) for l in open(report)]
assert len(rep) == 1 and rep[0]["ranks"] == ranks and rep[0]["resumed_step"] == steps - 1, rep
if ranks == 2:  # the srun job's layout: the same bits
    same = [json.loads(l) for l in open(srun_path) if l.strip()]
    assert [r["loss"] for r in rows] == [q["loss"] for q in same], (rows, same)
else:  # steps 1..STEPS-1 on 2 ranks, the last on one: the reference's 1e-5 (see above)
    ref = [json.loads(l) for l in open(ref_path) if l.strip()]
    for r, q in zip(rows, ref):
        assert abs(r["loss"] - q["loss"]) <= 1e-5 * abs(q["loss"]), (r["step"], r["loss"], q["loss"])
k = int(open(killed).read()) / 1e9
print(f"supervise {sys.argv[6]} rank(s) after the kill: kill -> step {rep[0]['first_step']} of the relaunch "
      f"{rep[0]['first_step_at'] - k:.2f} s (srun's exit seen after {rep[0]['failed_at'] - k:.2f} s)")
PY
done
echo "slurm multinode test passed in $(($(date +%s) - START)) s"
