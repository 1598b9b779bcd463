#!/usr/bin/env bash
# The README's lines after the demo work as written, in order. In a scratch tree (launch/ of the
# checkout, build/shardtrain the built binary) a short stand-in for launch/demo.sh leaves what the
# demo leaves (runs/demo/checkpoints with two checkpoints, --keep-checkpoints 2, runs/demo/
# metrics.jsonl); then the commands of README.md's "after launch/demo.sh" group, read from the
# README itself, run one after the other: the new 50-step run saves its step 50 and keeps the
# demo's checkpoints, the sample loads that step 50, the plots are written (or, without gnuplot,
# the TSV), and the demo's run goes on with --resume (to 12 steps here instead of the README's
# 300, the one change: 288 more steps of 2 ranks would take minutes) from its last checkpoint.
# usage: readme_flow_test.sh REPO_ROOT SHARDTRAIN
set -uo pipefail
REPO="$1" BIN="$2"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/build" && ln -s "$BIN" "$T/build/shardtrain" && ln -s "$REPO/launch" "$T/launch"
cd "$T"
fails=0
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# the demo's leftovers: steps 4 and 8 of the demo config, 2 ranks
launch/mpirun.sh -n 2 -- build/shardtrain train --config launch/configs/demo.yaml --steps 8 --checkpoint-every 4 \
  --checkpoint-dir runs/demo/checkpoints --metrics runs/demo/metrics.jsonl --log-every 100 >demo.out 2>&1 ||
  { cat demo.out; echo "FAIL: the stand-in demo run"; exit 1; }
[[ -d runs/demo/checkpoints/step_00000004 && -d runs/demo/checkpoints/step_00000008 ]] || { echo "FAIL: demo checkpoints"; exit 1; }

# README.md's commands from "# after launch/demo.sh" to the next comment line, continuations joined
mapfile -t cmds < <(python3 - "$REPO/README.md" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
block = text.split("## Usage", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
lines, out, take = block.replace("\\\n", " ").splitlines(), [], False
for l in lines:
    if l.startswith("# after launch/demo.sh"):
        take = True
        continue
    if take and l.startswith("#"):
        break
    if take and l.strip():
        out.append(re.sub(r"\s+#.*$", "", l).strip())
print("\n".join(out))
PY
)
[[ ${#cmds[@]} -eq 4 ]] || { printf 'FAIL: expected 4 commands after the demo in README.md, got %s:\n%s\n' "${#cmds[@]}" "${cmds[*]}"; exit 1; }
[[ "${cmds[0]}" == "build/shardtrain train --config launch/configs/demo.yaml --steps 50 "* ]] || bad "first command: ${cmds[0]}"
[[ "${cmds[1]}" == "build/shardtrain sample "* && "${cmds[2]}" == "launch/plot.sh "* ]] || bad "sample, plot: ${cmds[1]} / ${cmds[2]}"
[[ "${cmds[3]}" == *" --steps 300 --resume 1" ]] || bad "fourth command: ${cmds[3]}"
cmds[3]="${cmds[3]/--steps 300/--steps 12}"

run() {  # run I: README command I+1, its output in outI.txt
  echo "+ ${cmds[$1]}"
  eval "${cmds[$1]}" >"out$1.txt" 2>&1 || bad "README command $(($1 + 1)) failed: ${cmds[$1]}: $(tail -5 "out$1.txt")"
}
run 0
ckpt_dir=$(sed -n 's/.*--checkpoint-dir \([^ ]*\).*/\1/p' <<<"${cmds[0]}")
[[ -d "$ckpt_dir/step_00000050" ]] || bad "the 50-step run's checkpoint is missing: $(ls -R runs | head -20)"
[[ -d runs/demo/checkpoints/step_00000004 && -d runs/demo/checkpoints/step_00000008 ]] || bad "the demo's checkpoints were touched"
run 1
run 2
run 3
grep -q "^sample: $ckpt_dir/step_00000050 (gpt" out1.txt || bad "the sample did not load the new run's step 50: $(head -2 out1.txt)"
if command -v gnuplot >/dev/null; then
  for p in loss lr grad_norm throughput; do [[ -s runs/one/plots/$p.png ]] || bad "plot $p.png missing"; done
else
  grep -q "gnuplot not found" out2.txt || bad "no gnuplot: plot.sh did not say so"
fi
grep -q "^resumed from runs/demo/checkpoints/step_00000008 at step 8$" out3.txt || bad "the demo's run did not resume: $(head -5 out3.txt)"
grep -q "^lr schedule: the checkpoint's cosine ends at step 8; steps 9-12 run at its floor lr" out3.txt ||
  bad "the resumed run does not say its schedule keeps its length: $(head -5 out3.txt)"
[[ $(grep -c . runs/demo/metrics.jsonl) -eq 12 ]] || bad "the demo's metrics do not run to step 12 (appended)"

[[ $fails -eq 0 ]] && echo "readme flow test passed" || exit 1
