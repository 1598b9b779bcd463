# Sourced by the fault scripts that stop or kill a rank under a real mpirun (deadline_faults.sh,
# rank_faults.sh, startup_stop_test.sh, generate_stop_test.sh): their work folder, the cleanup
# that lets no stopped rank or mpirun outlive the test, a clock and a rank's pid.
# The script sets MPIRUN_PID when it starts mpirun and VICTIM to the pid it stops or kills.
WORK=$(mktemp -d)
MPIRUN_PID=""
VICTIM=""
cleanup() {
  [[ -n "$VICTIM" ]] && kill -CONT "$VICTIM" 2>/dev/null && kill -KILL "$VICTIM" 2>/dev/null
  [[ -n "$MPIRUN_PID" ]] && kill -KILL "$MPIRUN_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
rank_pid() {  # the pid of rank $1 among mpirun's children
  local p
  for p in $(pgrep -P "$MPIRUN_PID"); do
    if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then
      echo "$p"
      return
    fi
  done
}
