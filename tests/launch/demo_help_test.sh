#!/usr/bin/env bash
# `launch/demo.sh --help` prints demo's own usage and exits 0 without running anything: no
# set-up, no build, no training, and runs/demo is left alone. Runs a copy of demo.sh in a
# scratch tree whose launch/setup.sh, launch/mpirun.sh and cmake record that they were called.
# usage: demo_help_test.sh REPO_ROOT
set -uo pipefail
REPO="${1:?usage: demo_help_test.sh REPO_ROOT}"
T=$(mktemp -d "${TMPDIR:-/tmp}/st-demo-help.XXXXXX")
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/launch" "$T/runs/demo" "$T/bin"
cp "$REPO/launch/demo.sh" "$T/launch/demo.sh"
for f in launch/setup.sh launch/mpirun.sh bin/cmake; do
  printf '#!/bin/sh\necho "%s $*" >>"%s/called"\n' "$f" "$T" >"$T/$f"
  chmod +x "$T/$f"
done
echo keep >"$T/runs/demo/marker"
fails=0
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

for flag in --help -h "--steps 5 --help"; do
  rm -f "$T/called"
  # shellcheck disable=SC2086
  out=$(PATH="$T/bin:$PATH" "$T/launch/demo.sh" $flag 2>&1)
  rc=$?
  [[ $rc -eq 0 ]] || bad "demo.sh $flag: exit $rc"
  [[ "$out" == *"launch/demo.sh [extra train flags"* && "$out" == *"launch/demo.sh --help"* ]] ||
    bad "demo.sh $flag: demo's usage not printed: $out"
  [[ "$out" != *"usage: shardtrain train"* && "$out" != *Traceback* ]] ||
    bad "demo.sh $flag: printed more than its usage: $out"
  [[ ! -e "$T/called" ]] || bad "demo.sh $flag ran: $(cat "$T/called")"
  [[ -f "$T/runs/demo/marker" ]] || bad "demo.sh $flag deleted runs/demo"
done
[[ $fails -eq 0 ]] && echo "demo --help test passed" || exit 1
