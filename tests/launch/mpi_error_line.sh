#!/usr/bin/env bash
# Under mpirun with 2 ranks, a bad flag gives a one-line cause naming the rank, and a non-zero
# exit of the job. Every rank that gets to print writes exactly that line; mpirun ends the other
# ranks as soon as the first exits non-zero, so a rank may be killed before its line (seen in CI):
# at least one such line, and no malformed error line. Usage: mpi_error_line.sh MPIEXEC SHARDTRAIN
set -u
MPIEXEC="$1"
BIN="$2"
out=$("$MPIEXEC" -np 2 --oversubscribe --allow-run-as-root "$BIN" train --lr abc 2>&1)
rc=$?
echo "$out"
echo "rc=$rc"
[[ $rc -ne 0 ]] || { echo "FAIL: exit code 0"; exit 1; }
good="^\[rank [01]\] shardtrain: error: command line: flag --lr: expected a finite number, got 'abc'$"
n_good=$(echo "$out" | grep -c "$good")
n_err=$(echo "$out" | grep -c "shardtrain: error:")
[[ $n_good -ge 1 ]] || { echo "FAIL: no error line naming a rank"; exit 1; }
[[ $n_err -eq $n_good ]] || { echo "FAIL: $((n_err - n_good)) malformed error line(s)"; exit 1; }
echo PASS
