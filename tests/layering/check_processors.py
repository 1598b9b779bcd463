#!/usr/bin/env python3
"""Every test that starts ranks declares them to ctest (tests/CMakeLists.txt's rule).

launch/test.sh runs two tests at a time on 2 cores (ctest -j). A test whose mpirun starts n ranks
must declare PROCESSORS n (a binary under mpirun) or at least 2 (a script given the mpirun path:
its -np lies inside it), or ctest runs it beside another and their ranks starve each other. Under
that starvation a deadline test's 2 s deadline fired before its fault was injected (CI, stop 41:
test_launch_deadline_faults_dp2pp2 beside dp2tp2 and the checkpoint probes, 12 ranks on 2 cores).

Usage: check_processors.py CTEST BUILD_DIR. Lists every offender; exit 1 if there is one.
"""
import json
import os
import subprocess
import sys


def main() -> int:
    ctest, build = sys.argv[1], sys.argv[2]
    shown = subprocess.run([ctest, "--show-only=json-v1", "--test-dir", build],
                           check=True, capture_output=True, text=True).stdout
    tests = json.loads(shown)["tests"]
    offenders = []
    checked = 0
    for t in tests:
        command = t.get("command") or []
        launchers = [i for i, a in enumerate(command)
                     if os.path.basename(a) in ("mpiexec", "mpirun", "orterun")]
        if not launchers:
            continue
        checked += 1
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        processors = int(props.get("PROCESSORS", 1))
        i = launchers[0]
        if i == 0:  # mpirun -n N binary: N ranks
            np = next(int(command[j + 1]) for j in range(len(command) - 1)
                      if command[j] in ("-n", "-np", "-c", "--np"))
            if processors != np:
                offenders.append(f"{t['name']}: starts {np} ranks, PROCESSORS {processors}")
        elif processors < 2:  # a script given the launcher: its rank counts are inside it
            offenders.append(f"{t['name']}: a script given {command[i]} declares PROCESSORS "
                             f"{processors} (set its largest -np)")
    for o in offenders:
        print(o)
    if checked == 0:
        print("no test starts mpirun: the check found nothing to check (is MPI configured?)")
        return 1
    print(f"{checked} tests start ranks; {len(offenders)} undeclared")
    return 1 if offenders else 0


if __name__ == "__main__":
    sys.exit(main())
