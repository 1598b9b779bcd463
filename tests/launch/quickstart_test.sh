#!/usr/bin/env bash
# README.md's "Quick start" runs as written and prints what it shows: in a scratch tree
# (build/shardtrain the built binary, launch/ of the checkout, README.md the text to prepare) its
# commands run in order, read from the README itself, with one change — --steps 100 becomes 6
# (and the lines that follow from it: "of 6", "over 6 steps", validation "every 1 steps") — and
# the Ctrl-C it marks sent at step 3 by the signal seam (SHARDTRAIN_TEST_SIGNAL_STEP, SIGINT).
# Every "# ..." line after a command must be one of that command's lines ("…": any text); the
# interrupted command exits 130, the others 0; the run folder holds what the README says.
# usage: quickstart_test.sh REPO_ROOT SHARDTRAIN
set -uo pipefail
REPO="$1" BIN="$2"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/build" "$T/runs" && ln -s "$BIN" "$T/build/shardtrain" && ln -s "$REPO/launch" "$T/launch" &&
  cp "$REPO/README.md" "$T/README.md"
cd "$T"
export SHARDTRAIN_PROGRESS=0
python3 - "$REPO/README.md" <<'PY'
import re, subprocess, sys
text = open(sys.argv[1]).read()
block = text.split("## Quick start", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
subs = [("--steps 100", "--steps 6"), ("of 100;", "of 6;"), ("over 100 steps", "over 6 steps"), ("every 10 steps", "every 1 steps")]
def sub(s):
    for a, b in subs:
        s = s.replace(a, b)
    return s
steps = []  # [command, expected lines, interrupted]
for line in block.strip().splitlines():
    if line.startswith("# ("):
        steps[-1][2] = "Ctrl-C" in line
    elif line.startswith("# "):
        steps[-1][1].append(sub(line[2:]))
    elif line.strip():
        steps.append([sub(line.strip()), [], False])
assert len(steps) >= 5, steps
fails = 0
for cmd, want, interrupted in steps:
    env = {"SHARDTRAIN_TEST_SIGNAL_STEP": "3", "SHARDTRAIN_TEST_SIGNAL": "INT"} if interrupted else {}
    import os
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True, errors="replace", env={**os.environ, **env}, timeout=240)
    out = (r.stdout + r.stderr).splitlines()
    code = 130 if interrupted else 0
    if r.returncode != code:
        print(f"FAIL: exit {r.returncode} (want {code}): {cmd}\n" + "\n".join(out[-5:]), file=sys.stderr)
        fails += 1
    for w in want:
        pattern = "^" + ".+".join(re.escape(p) for p in w.split("…")) + "$"
        if not any(re.match(pattern, o) for o in out):
            print(f"FAIL: no line '{w}' from: {cmd}\n" + "\n".join(out), file=sys.stderr)
            fails += 1
sys.exit(1 if fails else 0)
PY
rc=$?
for f in runs/mine/checkpoints/step_00000006/state.json runs/mine/metrics.jsonl runs/mine/config.yaml runs/mine/plots/metrics.tsv; do
  [[ -f "$f" ]] || { echo "FAIL: no $f: $(ls -R runs/mine | head -20)" >&2; rc=1; }
done
[[ $rc -eq 0 ]] && echo "quick start test passed" || exit 1
