#!/usr/bin/env bash
# Under mpirun with 2 ranks, a bad flag gives a one-line cause naming the rank, and a non-zero
# exit of the job. Every rank fails alike, so the line is printed once, by rank 0
# (launch/error_report.h), and there is no malformed error line. Usage: mpi_error_line.sh MPIEXEC SHARDTRAIN
set -u
MPIEXEC="$1"
BIN="$2"
out=$("$MPIEXEC" -np 2 --oversubscribe --allow-run-as-root "$BIN" train --lr abc 2>&1)
rc=$?
echo "$out"
echo "rc=$rc"
[[ $rc -ne 0 ]] || { echo "FAIL: exit code 0"; exit 1; }
good="^\[rank 0\] shardtrain: error: command line: flag --lr: expected a finite number, got 'abc'$"
n_good=$(echo "$out" | grep -c "$good")
n_err=$(echo "$out" | grep -c "shardtrain: error:")
[[ $n_good -eq 1 ]] || { echo "FAIL: $n_good error lines naming rank 0, want 1"; exit 1; }
[[ $n_err -eq $n_good ]] || { echo "FAIL: $((n_err - n_good)) malformed error line(s)"; exit 1; }
echo PASS
