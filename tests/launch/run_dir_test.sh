#!/usr/bin/env bash
# --run-dir DIR (launch/run_dir.h): one folder holds the run's checkpoints, metrics and resolved
# config; the config reads back (--config DIR/config.yaml) into the same run: resumed, it goes on in
# DIR; into another --run-dir, it trains the same losses bit for bit; a --metrics given on the
# command line keeps its path; launch/plot.sh --run-dir DIR writes DIR/plots; plan's lines from a
# config that names its run's folder get a --run-dir each.
# usage: run_dir_test.sh SHARDTRAIN SOURCE_DIR
set -uo pipefail
BIN="$1" SRC="$2"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fails=0
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
small=(train --layers 2 --d-model 32 --heads 4 --seq-len 16 --micro-batch 2 --grad-accum 2 --lr 3e-3 --log-every 100)
runq() { "$@" >"$D/last.out" 2>&1 || bad "exit $?: $* : $(tail -3 "$D/last.out")"; }
lines() { [[ -f "$1" ]] && wc -l <"$1" || echo 0; }

runq "$BIN" "${small[@]}" --steps 3 --run-dir "$D/r"
[[ -f "$D/r/checkpoints/step_00000003/state.json" && $(lines "$D/r/metrics.jsonl") -eq 3 && -f "$D/r/config.yaml" ]] ||
  bad "--run-dir: $(ls -R "$D/r" | head -20)"
grep -qx "checkpoint-dir: $D/r/checkpoints" "$D/r/config.yaml" && grep -qx "steps: 3" "$D/r/config.yaml" &&
  grep -qx "lr: 0.003" "$D/r/config.yaml" || bad "config.yaml: $(cat "$D/r/config.yaml")"
# read back into another run dir: the same losses
runq "$BIN" train --config "$D/r/config.yaml" --run-dir "$D/r2"
python3 - "$D/r/metrics.jsonl" "$D/r2/metrics.jsonl" <<'PY' || bad "config.yaml read back trains other losses"
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert [(x["step"], x["loss"], x["grad_norm"]) for x in a] == [(y["step"], y["loss"], y["grad_norm"]) for y in b], (a, b)
PY
[[ -f "$D/r2/checkpoints/step_00000003/state.json" ]] || bad "--run-dir on the command line over the file's: $(ls "$D/r2")"
# resumed from its own config: goes on in DIR
runq "$BIN" train --config "$D/r/config.yaml" --steps 5 --resume 1
grep -q "^resumed from $D/r/checkpoints/step_00000003 at step 3$" "$D/last.out" && [[ $(lines "$D/r/metrics.jsonl") -eq 5 ]] ||
  bad "resume from config.yaml: $(head -3 "$D/last.out")"
grep -qx "steps: 5" "$D/r/config.yaml" || bad "config.yaml not the resumed run's"
# --metrics on the command line keeps its path
runq "$BIN" "${small[@]}" --steps 2 --run-dir "$D/r3" --metrics "$D/m.jsonl"
[[ $(lines "$D/m.jsonl") -eq 2 && ! -e "$D/r3/metrics.jsonl" && -d "$D/r3/checkpoints/step_00000002" ]] ||
  bad "--metrics with --run-dir: $(ls "$D" "$D/r3")"
# a run refused for another run's checkpoints leaves that run's config.yaml alone
cp "$D/r/config.yaml" "$D/before.yaml"
"$BIN" "${small[@]}" --steps 9 --run-dir "$D/r" >"$D/refused.out" 2>&1 && bad "a fresh run into a run dir with checkpoints was not refused"
cmp -s "$D/before.yaml" "$D/r/config.yaml" || bad "a refused run rewrote config.yaml"
# plan: a config file that names where its run goes gets a --run-dir of its own on the printed
# line (a second run from it would be refused in the file's folder); the command line's keeps it
plan=$("$BIN" plan --config "$D/r/config.yaml" 2>&1) || bad "plan: $plan"
[[ "$plan" == *"run it: "*" train --config $D/r/config.yaml --run-dir runs/config"* ]] || bad "plan's line: $plan"
plan=$("$BIN" plan --config "$D/r/config.yaml" --checkpoint-dir "$D/elsewhere" 2>&1) || bad "plan: $plan"
[[ "$plan" == *"run it: "* && "$plan" != *"--run-dir"* ]] || bad "plan's line with --checkpoint-dir: $plan"
plan=$("$BIN" plan --config "$D/r/config.yaml" --gpu-memory 1GiB --world 2 --device cpu --precision fp32 2>&1) || bad "plan: $plan"
[[ $(grep -c -- "--run-dir runs/config-dp" <<<"$plan") -ge 2 &&
   $(grep -o -- "--run-dir runs/config-[a-z0-9-]*" <<<"$plan" | sort | uniq -d | wc -l) -eq 0 ]] ||
  bad "plan's layout lines: not one run dir each: $plan"

# plots (or, without gnuplot, their TSV) under DIR/plots
"$SRC/launch/plot.sh" --run-dir "$D/r" >"$D/plot.out" 2>&1 || bad "plot.sh --run-dir: $(cat "$D/plot.out")"
[[ -f "$D/r/plots/metrics.tsv" ]] || bad "plot.sh --run-dir wrote no $D/r/plots/metrics.tsv"

[[ $fails -eq 0 ]] && echo "run dir test passed" || exit 1
