#!/usr/bin/env bash
# launch/setup.sh on a machine like the GPU box: no package network (apt-get is a stub that fails
# as an offline apt does: "Unable to locate package"), dpkg-query/dpkg know no package, and the
# real tools and libraries are on this machine. Checks that setup.sh
#   1. finds what the build needs by looking (CMake's find_package, PATH), never by dpkg: exit 0,
#      silent, apt-get never called;
#   2. tries an optional extra it lacks (SHARDTRAIN_SETUP_HIDE=gnuplot), then says in one line
#      what it skipped and exits 0;
#   3. with a needed piece made missing (SHARDTRAIN_SETUP_HIDE=<CMake package>) asks apt-get for
#      exactly its Debian package and fails with one line naming it, each of the five packages;
#   4. fails when apt-get "succeeds" but the piece is still not found (it checks again);
#   5. refuses a cmake older than 3.25, naming the version found.
# usage: setup_test.sh REPO_ROOT
set -uo pipefail
REPO="${1:?usage: setup_test.sh REPO_ROOT}"
T=$(mktemp -d "${TMPDIR:-/tmp}/st-setup-test.XXXXXX")
trap 'rm -rf "$T"' EXIT
fails=0
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# ---- stubs: an offline apt-get, a dpkg that knows nothing, a sudo that never prompts -----------
mkdir -p "$T/offline" "$T/online" "$T/oldcmake"
cat >"$T/offline/apt-get" <<'SH'
#!/bin/sh
echo "apt-get $*" >>"$APT_LOG"
if [ "$1" = update ]; then
  echo "W: Failed to fetch http://archive.ubuntu.com/ubuntu/dists/noble/InRelease  Temporary failure resolving 'archive.ubuntu.com'"
  exit 0
fi
for a in "$@"; do case "$a" in -*|install) ;; *) echo "E: Unable to locate package $a" >&2; exit 100 ;; esac; done
SH
cat >"$T/online/apt-get" <<'SH'
#!/bin/sh
echo "apt-get $*" >>"$APT_LOG"
exit 0
SH
for d in offline online; do
  printf '#!/bin/sh\necho "dpkg-query: no packages found matching $*" >&2\nexit 1\n' >"$T/$d/dpkg-query"
  printf '#!/bin/sh\necho "dpkg: no packages found" >&2\nexit 1\n' >"$T/$d/dpkg"
  printf '#!/bin/sh\n[ "$1" = -n ] && shift\nexec "$@"\n' >"$T/$d/sudo"
done
real_cmake=$(command -v cmake)
printf '#!/bin/sh\nif [ "$1" = --version ]; then echo "cmake version 3.22.1"; exit 0; fi\nexec %s "$@"\n' "$real_cmake" \
  >"$T/oldcmake/cmake"
chmod +x "$T"/*/*

# run STUBDIR [VAR=VALUE...] → $rc, $out, $err, $apt (apt-get's calls)
run() {
  local stubs="$1"; shift
  : >"$T/apt.log"
  env "$@" APT_LOG="$T/apt.log" PATH="$stubs:$PATH" "$REPO/launch/setup.sh" >"$T/out" 2>"$T/err"
  rc=$?
  out=$(cat "$T/out"); err=$(cat "$T/err"); apt=$(cat "$T/apt.log")
}
lines() { [[ -z "$1" ]] && echo 0 || wc -l <<<"$1"; }

# 1. Everything the build needs is here: exit 0, nothing printed, apt-get not called.
run "$T/offline" SHARDTRAIN_SETUP_EXTRAS=none SHARDTRAIN_SETUP_HIDE=
[[ $rc -eq 0 ]] || bad "1: exit $rc with all tools present (stderr: $err)"
[[ -z "$out$err" ]] || bad "1: expected silence, got: $out$err"
[[ -z "$apt" ]] || bad "1: apt-get was called: $apt"

# 2. An optional extra that is missing: tried, skipped in one line, exit 0.
run "$T/offline" SHARDTRAIN_SETUP_EXTRAS=plots SHARDTRAIN_SETUP_HIDE=gnuplot
[[ $rc -eq 0 ]] || bad "2: exit $rc for a missing optional extra (stderr: $err)"
grep -q 'apt-get install .*gnuplot-nox' <<<"$apt" || bad "2: apt-get was not asked for gnuplot-nox: $apt"
skip=$(grep '^setup: skipped' <<<"$out")
[[ $(lines "$skip") -eq 1 && "$skip" == *"gnuplot-nox (launch/plot.sh)"* && "$skip" == *"Unable to locate package"* ]] ||
  bad "2: expected one 'setup: skipped ... gnuplot-nox (launch/plot.sh) ... Unable to locate package' line, got: $out"
[[ -z "$err" ]] || bad "2: stderr not empty: $err"

# 3. A needed CMake package made missing: apt-get asked for its Debian package, one line names it.
declare -A DEB=([MPI]=libopenmpi-dev [Eigen3]=libeigen3-dev [nlohmann_json]=nlohmann-json3-dev
                [yaml-cpp]=libyaml-cpp-dev [GTest]=libgtest-dev [PCRE2]=libpcre2-dev)
for p in "${!DEB[@]}"; do
  run "$T/offline" SHARDTRAIN_SETUP_EXTRAS=none SHARDTRAIN_SETUP_HIDE="$p"
  [[ $rc -ne 0 ]] || bad "3: exit 0 with $p missing"
  [[ $(lines "$err") -eq 1 && "$err" == "setup: missing $p (Debian: ${DEB[$p]}); apt-get could not install"* ]] ||
    bad "3: with $p missing, expected one line 'setup: missing $p (Debian: ${DEB[$p]}); apt-get could not install ...', got: $err"
  inst=$(grep ' install ' <<<"$apt")
  [[ "$inst" =~ install\ .*-y.*\ ${DEB[$p]}$ && $(wc -w <<<"${inst##*--no-install-recommends}") -eq 1 ]] ||
    bad "3: with $p missing, apt-get should install exactly ${DEB[$p]}, was: $apt"
done
run "$T/offline" SHARDTRAIN_SETUP_EXTRAS=none SHARDTRAIN_SETUP_HIDE="yaml-cpp GTest"
[[ $rc -ne 0 && "$err" == *"yaml-cpp (Debian: libyaml-cpp-dev)"* && "$err" == *"GTest (Debian: libgtest-dev)"* &&
   "$err" != *Eigen3* ]] || bad "3: two missing: expected both named (and only them), got: $err"

# 4. apt-get "installs" but the package is still not found: setup checks again and fails.
run "$T/online" SHARDTRAIN_SETUP_EXTRAS=none SHARDTRAIN_SETUP_HIDE=yaml-cpp
[[ $rc -ne 0 && "$err" == "setup: still missing after apt-get install: yaml-cpp (Debian: libyaml-cpp-dev)" ]] ||
  bad "4: expected 'still missing after apt-get install: yaml-cpp', got rc=$rc: $err"

# 5. A cmake older than 3.25 first on PATH.
run "$T/oldcmake:$T/offline" SHARDTRAIN_SETUP_EXTRAS=none SHARDTRAIN_SETUP_HIDE=
[[ $rc -ne 0 && "$err" == "setup: missing cmake >= 3.25 (found 3.22.1) (Debian: cmake); apt-get could not install"* ]] ||
  bad "5: expected 'missing cmake >= 3.25 (found 3.22.1)', got rc=$rc: $err"

[[ $fails -eq 0 ]] && echo "setup test passed (5 cases)" || { echo "setup test: $fails failure(s)" >&2; exit 1; }
