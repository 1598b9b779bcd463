#!/usr/bin/env bash
# Restart without a person: runs a `shardtrain train` job and, when it fails, relaunches it from
# its last complete checkpoint (--resume 1 from the same --checkpoint-dir), up to --max-restarts
# times; with --min-ranks M, on fewer ranks when fewer are left, the layout re-planned for them by
# `shardtrain plan` (the global batch kept through --grad-accum; the checkpoint reshards on load).
#
#   launch/supervise.sh --np 4 -- shardtrain train --config C.yaml --dp 2 --pp 2 \
#       --checkpoint-dir runs/x/checkpoints --metrics runs/x/metrics.jsonl
#   launch/supervise.sh --np 4 --min-ranks 2 --ranks-cmd 'cat runs/x/ranks' -- shardtrain train ...
#   launch/supervise.sh --launcher srun --mpi=pmix -- shardtrain train ...     (inside sbatch/salloc)
#
#   --np N             ranks of the first launch (with --launcher srun: $SLURM_NTASKS unless given)
#   --max-restarts K   relaunches after failures, in all (default 3); when they run out, the
#                      supervisor exits with the last failure's exit code and a one-line cause
#   --min-ranks M      may relaunch on M <= W < N ranks when --ranks-cmd says only W are left
#                      (default N: never on fewer). The supervisor cannot see which hosts died:
#   --ranks-cmd CMD    a shell command printing how many ranks can run now, asked before each
#                      relaunch (a health check, a count of a hostfile's slots, scontrol's view of
#                      the allocation); unset: N. More than N counts as N.
#   --gpu-memory SIZE  each device's memory, for the planner's choice of a smaller layout
#                      (default 1TiB: every layout fits, the cost model alone ranks them)
#   --launcher mpirun|srun   mpirun: launch/mpirun.sh -n W (default); srun: srun --unbuffered
#                      --ntasks=W --kill-on-bad-exit=1 inside the job's allocation (unbuffered: a
#                      line srun still held when a rank died was lost, and with it the job's
#                      first lines, so a job killed early read as failed before its first step)
#   --report FILE      one JSON line per restart (the fields of its line; times in Unix seconds)
#   Other options before "--" go to the launcher (mpirun.sh: --gpus, --hostfile F, --mca ...;
#   srun: --mpi=pmix, --cpu-bind=none ...). After "--": shardtrain train and its flags, as for
#   mpirun.sh; --checkpoint-dir must be among them (on the command line, not only in --config),
#   the run's root (a step folder stops being the newest once the run writes another).
#
# Relaunched: a job that exits non-zero after at least one step of its own (a rank killed, a
# deadline, a lost node). Not relaunched (the supervisor exits at once with the job's code): exit 2
# (a usage or config error), or a failure before the launch's first step (a cause a restart does
# not cure: a bad value, a checkpoint refused) — except a relaunch that lost a rank while starting
# (mpirun's or srun's line about a rank that died, or an exit by a signal: a second kill, a node
# lost again), which is relaunched like any failure while restarts are left. A relaunch on the same ranks keeps the flags (and
# so the layout: the resume is bit-exact on the CPU); one on W < N ranks takes the layout flags
# (--dp --tp --cp --pp --zero --recompute --grad-accum --schedule --virtual-stages --sequence-parallel) of the best line of
# `shardtrain plan FLAGS --dp D --tp T --pp P --world W --gpu-memory SIZE` (D T P: the first
# launch's layout, as rank 0 printed it), trying W, W-1, ... down to M until one keeps the global
# batch. One line per restart, printed at the relaunch's first step: what failed, the
# exit code, the step resumed from, the layout, the seconds from the failure's exit to that step.
# Steps are seen in the --metrics file when the flags name one (every step: srun may still drop a
# killed job's last lines, --unbuffered or not), else in the step lines (every --log-every); a
# launch's own steps are those after the checkpoint it resumes (the newest with a state.json;
# its "resumed from" line corrects that when it comes). SIGINT/SIGTERM to the supervisor end the
# job and the supervisor (through launch/mpirun.sh the ranks stop after a step and save first,
# docs/launch.md "Stopping a run"); a job whose ranks a signal stopped cleanly exits 0: not relaunched.
set -uo pipefail

usage() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; }
say() { echo "supervise: $*" >&2; }
fail() { say "$1"; exit "${2:-2}"; }

np=""
max_restarts=3
min_ranks=""
ranks_cmd=""
gpu_memory="1TiB"
launcher=mpirun
report=""
lopts=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --np|-n|-np) np="${2:-}"; shift 2 || fail "--np needs a value" ;;
    --max-restarts) max_restarts="${2:-}"; shift 2 || fail "--max-restarts needs a value" ;;
    --min-ranks) min_ranks="${2:-}"; shift 2 || fail "--min-ranks needs a value" ;;
    --ranks-cmd) ranks_cmd="${2:-}"; shift 2 || fail "--ranks-cmd needs a command" ;;
    --gpu-memory) gpu_memory="${2:-}"; shift 2 || fail "--gpu-memory needs a size" ;;
    --launcher) launcher="${2:-}"; shift 2 || fail "--launcher needs mpirun or srun" ;;
    --report) report="${2:-}"; shift 2 || fail "--report needs a file" ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) lopts+=("$1"); shift ;;
  esac
done
[[ $# -ge 2 && "$(basename "$1")" == shardtrain && "$2" == train ]] ||
  fail "expected '-- shardtrain train FLAGS' after the options (try --help)"
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$1"
if [[ "$bin" == shardtrain ]] && ! command -v shardtrain >/dev/null 2>&1; then bin="${SHARDTRAIN_BIN:-$root/build/shardtrain}"; fi
shift 2
train=("$@")
case "$launcher" in
  mpirun) ;;
  srun) [[ -n "$np" ]] || np="${SLURM_NTASKS:-}" ;;
  *) fail "--launcher: mpirun or srun, got '$launcher'" ;;
esac
[[ "$np" =~ ^[1-9][0-9]*$ ]] || fail "--np: a positive rank count is needed, got '${np}'"
[[ "$max_restarts" =~ ^[0-9]+$ ]] || fail "--max-restarts: a whole number >= 0, got '$max_restarts'"
min_ranks="${min_ranks:-$np}"
[[ "$min_ranks" =~ ^[1-9][0-9]*$ && "$min_ranks" -le "$np" ]] || fail "--min-ranks: 1 ... --np ($np), got '$min_ranks'"

# the flags' values supervise needs: the last --NAME VALUE (or --NAME=VALUE) on the command line
flag_value() {
  local name="$1" v="" i
  for ((i = 0; i < ${#train[@]}; i++)); do
    [[ "${train[i]}" == "--$name" ]] && v="${train[i + 1]:-}"
    [[ "${train[i]}" == "--$name="* ]] && v="${train[i]#*=}"
  done
  echo "$v"
}
# the flags without the named ones (and their values)
without() {
  local -n out_="$1"
  shift
  local skip=" $* " i a
  out_=()
  for ((i = 0; i < ${#train[@]}; i++)); do
    a="${train[i]}"
    if [[ "$a" == --* && "$skip" == *" ${a%%=*} "* ]]; then
      [[ "$a" == *=* ]] || ((i++))
      continue
    fi
    out_+=("$a")
  done
}
ckpt_dir=$(flag_value checkpoint-dir)
metrics=$(flag_value metrics)
[[ -n "$ckpt_dir" ]] || fail "--checkpoint-dir DIR must be among the train flags: a restart resumes from it"

layout_flags=(--dp --tp --cp --pp --zero --recompute --grad-accum --schedule --virtual-stages --sequence-parallel)
# The layout flags of `shardtrain plan`'s best line for W ranks, or nothing when no layout of W
# ranks keeps the global batch (the planner's line on stderr). The global batch is the first
# launch's: its dp, tp, pp as rank 0's layout line printed them (dp may be 0 = auto in the flags).
first_layout=()
plan_for() {
  local w="$1" out line words i
  out=$("$bin" plan "${train[@]}" ${first_layout[@]+"${first_layout[@]}"} --world "$w" --gpu-memory "$gpu_memory" \
    --top 1 2>&1) || {
    say "no layout of $w ranks: ${out##*$'\n'}"
    return 1
  }
  line=$(grep -E '^ +#1 ' <<<"$out" | head -1)
  [[ -n "$line" ]] || { say "shardtrain plan printed no best line for $w ranks"; return 1; }
  read -ra words <<<"$line"
  PLANNED=()
  for ((i = 0; i < ${#words[@]}; i++)); do
    for f in "${layout_flags[@]}"; do [[ "${words[i]}" == "$f" ]] && PLANNED+=("$f" "${words[i + 1]}"); done
  done
  [[ ${#PLANNED[@]} -gt 0 ]] || { say "no layout flags in shardtrain plan's line: $line"; return 1; }
}

# The step a launch of `args` starts from, as the files tell before it runs: under --resume the
# newest checkpoint of --checkpoint-dir that has its state.json (or the step folder it names),
# else 0. The job's "resumed from ... at step N" line, when it comes, has the last word (the
# trainer may fall back further); it may not come: srun drops the lines it still holds when a rank
# is killed (the model line, the step lines), so the metrics file alone must count the steps.
launch_from() {
  local i a resume=0 d n from=0
  for ((i = 0; i < ${#args[@]}; i++)); do
    a="${args[i]}"
    case "$a" in
      --resume) resume="${args[i + 1]:-1}" ;;
      --resume=*) resume="${a#--resume=}" ;;
    esac
  done
  if [[ "$resume" != 0 ]]; then
    if [[ "${ckpt_dir%/}" =~ /?step_0*([0-9]+)$ ]]; then
      from="${BASH_REMATCH[1]}"
    else
      for d in "$ckpt_dir"/step_*; do
        [[ -f "$d/state.json" && "${d##*/step_}" =~ ^0*([0-9]+)$ ]] || continue
        n="${BASH_REMATCH[1]}"
        ((n > from)) && from="$n"
      done
    fi
  fi
  echo "$from"
}

# Unix seconds with microseconds (bash 5's clock: no process per call)
now() { echo "$EPOCHREALTIME"; }
# the step of the metrics file's last line ("" when none)
metrics_step() {
  [[ -n "$metrics" && -s "$metrics" ]] || return 0
  local last
  last=$(tail -n 1 "$metrics" 2>/dev/null)
  [[ "$last" =~ \"step\":([0-9]+) ]] && echo "${BASH_REMATCH[1]}"
}

# mpirun ends a failed job's other ranks with SIGTERM and, 1 s later (Open MPI's
# odls_base_sigkill_timeout), SIGKILL; they hold nothing a relaunch needs (a checkpoint is renamed
# into place whole), so at once: about 1.1 s less lost per restart (docs/PERFORMANCE.md)
export OMPI_MCA_odls_base_sigkill_timeout="${OMPI_MCA_odls_base_sigkill_timeout:-0}"

JOB=""
on_signal() {
  [[ -n "$JOB" ]] && kill -TERM "$JOB" 2>/dev/null && wait "$JOB" 2>/dev/null
  # the job's last lines (through launch/mpirun.sh its ranks stop after a step: the stop line)
  [[ -n "$JOB" ]] && timeout 5 cat <&3 2>/dev/null
  say "stopped by a signal"
  exit 143
}
trap on_signal INT TERM
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

attempt=0
restarts=0
ranks="$np"
args=("${train[@]}")
layout="the flags' layout"
pending=""  # the restart line waiting for the relaunch's first step
# one launch: the job's stdout passed through and read for its steps; sets RC, STEPS (steps done
# in this launch), LAST_STEP, FIRST_AT (the time of its first step), RESUMED (step resumed from),
# CAUSE (the last error line on stderr, else "")
run_job() {
  local cmd line pend="" code from nrec=0 recs r watch=""
  case "$launcher" in
    mpirun) cmd=("$root/launch/mpirun.sh" -n "$ranks" ${lopts[@]+"${lopts[@]}"} -- "$bin" train "${args[@]}") ;;
    srun) cmd=(srun --unbuffered --ntasks="$ranks" --kill-on-bad-exit=1 ${lopts[@]+"${lopts[@]}"} "$bin" train "${args[@]}") ;;
  esac
  STEPS=0 LAST_STEP="" FIRST_AT="" CAUSE=""
  from=$(launch_from) RESUMED="$from"
  : >"$work/err"
  : >"$work/steps"
  rm -f "$work/out"
  mkfifo "$work/out"
  exec 5> >(tee "$work/err" >&2)  # stderr passed through, kept for the cause
  local tee_pid=$!
  "${cmd[@]}" >"$work/out" 2>&5 </dev/null &
  JOB=$!
  if [[ -n "$metrics" ]]; then
    watch_metrics "$JOB" &
    watch=$!
  fi
  exec 5>&- 3<"$work/out"
  # the steps of this launch: those after `from`, the step it starts from (launch_from; then
  # "resumed from ... at step N", printed right after the model line, when it comes)
  take_records() {
    mapfile -t -s "$nrec" recs <"$work/steps"
    nrec=$((nrec + ${#recs[@]}))
    for r in ${recs[@]+"${recs[@]}"}; do
      ((${r% *} > from)) && note_step "${r% *}" "${r#* }"
    done
  }
  while :; do
    if IFS= read -r -t 0.05 -u 3 line; then
      line="$pend$line" pend=""
      printf '%s\n' "$line"
      [[ "$line" == "resumed from "*" at step "* ]] && RESUMED="${line##* at step }" from="$RESUMED"
      # "layout: world 4 = dp 1 x tp 1 x cp 2 x pp 2" (the cp term only when cp > 1)
      if [[ ${#first_layout[@]} -eq 0 && "$line" =~ ^layout:\ world\ [0-9]+\ =\ dp\ ([0-9]+)\ x\ tp\ ([0-9]+)(\ x\ cp\ ([0-9]+))?\ x\ pp\ ([0-9]+) ]]; then
        first_layout=(--dp "${BASH_REMATCH[1]}" --tp "${BASH_REMATCH[2]}" --cp "${BASH_REMATCH[4]:-1}" --pp "${BASH_REMATCH[5]}")
      fi
      if [[ -z "$metrics" && "$line" =~ ^step\ +([0-9]+)/ ]]; then
        note_step "${BASH_REMATCH[1]}" "$(now)"  # with --metrics the metrics see every step
      fi
    else
      code=$?
      ((code > 128)) || break  # the end of the job's stdout
      pend+="$line"
    fi
    take_records
  done
  exec 3<&-
  wait "$JOB"
  RC=$?
  JOB=""
  [[ -n "$watch" ]] && wait "$watch"
  take_records
  wait "$tee_pid" 2>/dev/null
  [[ -z "$pend" ]] || printf '%s\n' "$pend"
  CAUSE=$(grep -E 'shardtrain: error: |exited on signal|mpirun noticed|srun: error: ' "$work/err" | head -1 || true)
}

# In the background while job $1 runs (and once after): "STEP TIME" into $work/steps each time
# the metrics file changes (inode or size: a resume rewrites it cut back, then appends), STEP its
# last line's; the state at the launch (the last run's lines) is not a change. Every 20 ms.
watch_metrics() {
  local id0 id s alive=1
  id0=$(stat -c '%i:%s' "$metrics" 2>/dev/null)
  while ((alive)); do
    kill -0 "$1" 2>/dev/null || alive=0
    id=$(stat -c '%i:%s' "$metrics" 2>/dev/null)
    if [[ -n "$id" && "$id" != "$id0" ]]; then
      id0="$id"
      s=$(metrics_step)
      [[ -n "$s" ]] && echo "$s $(now)" >>"$work/steps"
    fi
    ((alive)) && sleep 0.02
  done
}

# whether the launch that just ended lost a rank (killed, or its node gone) rather than failed
# by itself: mpirun's or srun's line about a rank that died, or an exit by a signal
lost_a_rank() {
  ((RC > 128)) || grep -qE 'exited on signal|mpirun noticed that process|srun: error: .*(Killed|signal|terminated)' "$work/err"
}

# a step seen (in the metrics or a step line): the first of a relaunch prints the restart's line
# (STEP TIME: when it was seen)
note_step() {
  [[ "$1" =~ ^[0-9]+$ ]] || return 0
  [[ -n "$LAST_STEP" && "$1" -le "$LAST_STEP" ]] && return 0
  LAST_STEP="$1"
  ((STEPS++))
  if [[ -z "$FIRST_AT" ]]; then
    FIRST_AT="$2"
    [[ -n "$pending" ]] && first_step_of_restart
  fi
}
first_step_of_restart() {
  local lost
  lost=$(awk -v a="$FIRST_AT" -v b="$FAILED_AT" 'BEGIN { printf "%.2f", a - b }')
  say "$pending; resumed from step ${RESUMED:-0}: step $LAST_STEP ran $lost s after the failure"
  if [[ -n "$report" ]]; then
    printf '{"restart":%d,"exit_code":%d,"cause":"%s","failed_after_step":%s,"ranks":%d,"layout":"%s","resumed_step":%s,"failed_at":%s,"first_step":%s,"first_step_at":%s,"lost_s":%s}\n' \
      "$restarts" "$FAILED_RC" "$(sed 's/[\\"]/\\&/g' <<<"$FAILED_CAUSE")" "${FAILED_STEP:-0}" "$ranks" "$layout" \
      "${RESUMED:-0}" "$FAILED_AT" "$LAST_STEP" "$FIRST_AT" "$lost" >>"$report"
  fi
  pending=""
}

while :; do
  ((attempt++))
  run_job
  if [[ -n "$pending" ]]; then  # a relaunch that ended before its first step
    say "$pending; it ended before its first step (exit $RC)"
    pending=""
  fi
  ((RC == 0)) && exit 0
  cause="${CAUSE:-exit $RC}"
  if ((RC == 2)); then
    say "not restarted: the job exited 2 (a usage or config error: $cause)"
    exit "$RC"
  fi
  # before its first step: the first launch's cause is one a restart does not cure (a bad value,
  # a checkpoint refused); a relaunch that lost a rank while starting (a second kill, a node lost
  # again) is a failure like the first, and restarts are left for it
  if ((STEPS == 0)) && { ((attempt == 1)) || ! lost_a_rank; }; then
    say "not restarted: the job failed before its first step (exit $RC: $cause)"
    exit "$RC"
  fi
  if ((restarts >= max_restarts)); then
    say "gave up after $restarts restart(s) (--max-restarts $max_restarts): the job exited $RC after step ${LAST_STEP:-?}: $cause"
    exit "$RC"
  fi
  FAILED_AT=$(now) FAILED_RC=$RC FAILED_STEP="$LAST_STEP" FAILED_CAUSE="$cause"
  ((restarts++))
  # the ranks left: ask, then the largest count from there down to --min-ranks with a layout
  avail="$np"
  if [[ -n "$ranks_cmd" ]]; then
    avail=$(bash -c "$ranks_cmd" 2>/dev/null | tail -n 1 | tr -d '[:space:]')
    [[ "$avail" =~ ^[0-9]+$ ]] || { say "gave up: --ranks-cmd printed '$avail', not a rank count (the job exited $RC: $cause)"; exit "$RC"; }
    ((avail > np)) && avail="$np"
  fi
  if ((avail == np)); then
    ranks="$np" layout="the flags' layout"
    without args --resume
  elif ((avail < min_ranks)); then
    say "gave up: $avail rank(s) left, fewer than --min-ranks $min_ranks (the job exited $RC after step ${LAST_STEP:-?}: $cause)"
    exit "$RC"
  else
    ranks=""
    for ((w = avail; w >= min_ranks; w--)); do
      if plan_for "$w"; then
        ranks="$w"
        break
      fi
    done
    if [[ -z "$ranks" ]]; then
      say "gave up: $avail rank(s) left, --min-ranks $min_ranks, and no layout of $min_ranks ... $avail ranks keeps the global batch (the job exited $RC: $cause)"
      exit "$RC"
    fi
    without args "${layout_flags[@]}" --resume
    args+=("${PLANNED[@]}")
    layout="${PLANNED[*]}"
  fi
  # --resume 1 from the same directory (made if the job died before making it: a fresh start)
  args+=(--resume 1)
  mkdir -p "$ckpt_dir"
  pending="restart $restarts/$max_restarts: the job exited $RC after step ${LAST_STEP:-?} ($cause); relaunched on $ranks rank$( ((ranks == 1)) || echo s) ($layout)"
done
