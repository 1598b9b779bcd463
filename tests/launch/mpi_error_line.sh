#!/usr/bin/env bash
# Under mpirun with 2 ranks, a bad flag gives each rank one line naming its rank, and a non-zero
# exit of the job. Usage: mpi_error_line.sh MPIEXEC SHARDTRAIN
set -u
MPIEXEC="$1"
BIN="$2"
out=$("$MPIEXEC" -np 2 --oversubscribe --allow-run-as-root "$BIN" train --lr abc 2>&1)
rc=$?
echo "$out"
echo "rc=$rc"
[[ $rc -ne 0 ]] || { echo "FAIL: exit code 0"; exit 1; }
for r in 0 1; do
  echo "$out" | grep -q "^\[rank $r\] shardtrain: error: command line: flag --lr: expected a finite number, got 'abc'$" ||
    { echo "FAIL: no error line for rank $r"; exit 1; }
done
echo PASS
