#!/usr/bin/env bash
# What `shardtrain train` prints is a log: (1) the progress bar only on a terminal — redirected to
# a file (a SLURM .out) the output holds plain step lines, no '\r' or escape sequences; under a
# pseudo-terminal (script) the bar is drawn; the same for mpirun's stdout; (2) the model line counts the whole model's
# parameters, each once, and its transformer blocks, the same under dp 2, tp 2 (a padded
# vocabulary shard), pp 2 and tp 2 x pp 2 as in one process, and equal to GPT-2's closed form;
# (3) an error every rank meets alike (a bad flag, a grid that does not divide the world) is
# printed once, by rank 0; an error of one rank only is printed by that rank, and the job ends.
# usage: log_lines_test.sh MPIEXEC SHARDTRAIN
set -uo pipefail
MPIEXEC="$1" BIN="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
cd "$D"
MPI=("$MPIEXEC" --oversubscribe --allow-run-as-root)
fails=0
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# (1) plain lines when redirected, the bar on a terminal
"$BIN" train --layers 1 --steps 3 --log-every 1 >plain.txt 2>&1 || bad "redirected run failed: $(cat plain.txt)"
[[ $(grep -c "^step [123]/3 | loss" plain.txt) -eq 3 ]] || bad "redirected run: not 3 step lines: $(cat plain.txt)"
if LC_ALL=C grep -q $'[\r\033]' plain.txt; then bad "redirected run holds '\\r' or escape sequences: $(od -c plain.txt | head)"; fi
script -qec "'$BIN' train --layers 1 --steps 3 --log-every 1" /dev/null >tty.txt 2>&1 || bad "run under script failed"
LC_ALL=C grep -q $'\033\\[K' tty.txt || bad "no progress bar on a terminal: $(od -c tty.txt | head)"
grep -q "3/3 100%" tty.txt || bad "the bar does not reach 3/3 on a terminal: $(cat tty.txt)"
# under mpirun every rank's stdout is a pseudo-terminal of Open MPI's: what counts is mpirun's
"${MPI[@]}" -np 2 "$BIN" train --layers 1 --steps 3 --dp 2 --log-every 1 >mpi_plain.txt 2>&1 || bad "mpirun redirected failed"
[[ $(grep -c "^step [123]/3 | loss" mpi_plain.txt) -eq 3 ]] || bad "mpirun redirected: not 3 step lines: $(cat mpi_plain.txt)"
if LC_ALL=C grep -q $'[\r\033]' mpi_plain.txt; then bad "mpirun redirected: '\\r' or escapes: $(od -c mpi_plain.txt | head)"; fi
script -qec "'$MPIEXEC' --oversubscribe --allow-run-as-root -np 2 '$BIN' train --layers 1 --steps 3 --dp 2" /dev/null >mpi_tty.txt 2>&1
LC_ALL=C grep -q $'\033\\[K' mpi_tty.txt || bad "mpirun on a terminal: no progress bar: $(od -c mpi_tty.txt | head)"

# (2) the model line: V = 251 (tp 2 pads it to 252), C = 96, T = 64, 3 blocks:
# wte V·C + wpe T·C + blocks · (12 C² + 13 C) + ln_f 2 C
V=251 C=96 T=64 L=3
want="model gpt: $((V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C)) parameters, $L blocks |"
model=(train --layers $L --d-model $C --heads 6 --vocab $V --seq-len $T --steps 1 --micro-batch 2)
line() { grep "^model " | cut -d'|' -f1 | sed 's/ *$/ |/'; }
got=$("$BIN" "${model[@]}" 2>&1 | line)
[[ "$got" == "$want" ]] || bad "one process: '$got', want '$want'"
for layout in "2:--dp 2" "2:--tp 2" "2:--pp 2" "2:--tp 2 --zero 1" "4:--tp 2 --pp 2" "3:--pp 3"; do
  np=${layout%%:*} flags=${layout#*:}
  # shellcheck disable=SC2086
  got=$("${MPI[@]}" -np "$np" "$BIN" "${model[@]}" $flags 2>&1 | line)
  [[ "$got" == "$want" ]] || bad "np $np $flags: '$got', want '$want'"
done

# (3) errors: once when every rank fails alike, by its rank when only one does
once() {  # once NAME EXPECTED-LINE-REGEX -- command...
  local name="$1" re="$2"
  shift 3
  local out rc
  out=$(timeout 60 "$@" 2>&1)
  rc=$?
  [[ $rc -ne 0 && $rc -ne 124 ]] || bad "$name: exit $rc"
  [[ $(grep -c "shardtrain: error:" <<<"$out") -eq 1 ]] || bad "$name: not one error line: $out"
  grep -Eq "$re" <<<"$out" || bad "$name: no line matching $re: $out"
}
once "bad flag, 2 ranks" "^\[rank 0\] shardtrain: error: command line: flag --lr: expected a finite number, got 'abc'$" \
  -- "${MPI[@]}" -np 2 "$BIN" train --lr abc
once "bad flag, 3 ranks" "^\[rank 0\] shardtrain: error: --heads \(from command line\)" \
  -- "${MPI[@]}" -np 3 "$BIN" train --heads 5
once "grid" "^\[rank 0\] shardtrain: error: --tp 2 x --pp 1 needs a multiple of 2 ranks \(dp = ranks / 2\); this job has 3: run launch/mpirun.sh -n 2 -- " \
  -- "${MPI[@]}" -np 3 "$BIN" train --tp 2 --steps 1
export BIN
once "rank 1 only" "^\[rank 1\] shardtrain: error: command line: flag --lr" \
  -- "${MPI[@]}" -np 2 sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then exec "$BIN" train --lr abc; else exec "$BIN" train --steps 2; fi'
out=$(timeout 60 "${MPI[@]}" -np 2 sh -c \
  'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then exec "$BIN" train --lr abc; else exec "$BIN" train --heads 5; fi' 2>&1)
grep -q "^\[rank 1\] shardtrain: error: command line: flag --lr" <<<"$out" &&
  grep -q "^\[rank 0\] shardtrain: error: --heads" <<<"$out" || bad "two different errors: each rank's line expected: $out"

[[ $fails -eq 0 ]] && echo "log lines test passed" || exit 1
