#!/usr/bin/env bash
# Makes sure this machine has what shardtrain's build and tests need, by looking for it (not by
# asking dpkg), and installs with apt-get only what is missing. Quiet when everything is there.
#
#   launch/setup.sh            needed pieces, then the optional extras named by SHARDTRAIN_SETUP_EXTRAS
#   launch/setup.sh --help     this text
#
# Needed (a missing one is installed through apt-get; if that fails, one line names it, exit 1):
#   cmake >= 3.25 on PATH, a C++ compiler ($CXX, c++ or g++), make (or ninja when
#   CMAKE_GENERATOR=Ninja), mpirun, python3, and what CMakeLists.txt finds with find_package:
#   MPI (mpicxx), Eigen3, nlohmann_json, yaml-cpp, GTest, PCRE2 (libpcre2-dev: the Unicode regexes of
#   Hugging Face tokenizer.json files; found by find_path / find_library as CMakeLists.txt does). Those are looked for by the CMake on
#   PATH itself, in a throw-away probe project, so CMAKE_PREFIX_PATH and friends count as they do
#   for the build. CUDA is never installed here: the build is CPU-only without it.
# Optional extras (missing ones are tried through apt-get; what cannot be installed is named in
# one "setup: skipped" line and the script goes on, exit 0):
#   slurm   slurm-wlm + munge + iproute2   the slurm ctests (real slurmctld + slurmd; ip netns)
#   plots   gnuplot-nox         launch/plot.sh
#   ccache  ccache              compiler cache
#   node    nodejs + npm        the tokenizer tests against the npm packages gpt-3-encoder and tokenizers
# Environment:
#   SHARDTRAIN_SETUP_EXTRAS  which extras to look for: "all" (default; "1" too), "none" ("0"),
#                            or a list, e.g. "plots ccache" (launch/demo.sh's choice)
#   SHARDTRAIN_SETUP_HIDE    test hook: pieces to treat as not found, e.g. "yaml-cpp gnuplot" — a
#                            command name (as in the lists above) is taken as not on PATH, a CMake
#                            package name as not found (CMAKE_DISABLE_FIND_PACKAGE_<name>=ON)
# apt-get runs with sudo when not root (sudo -n for extras, so it never prompts for them), and
# `apt-get update` at most once.
set -euo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; fi

extras="${SHARDTRAIN_SETUP_EXTRAS:-all}"
case "$extras" in 1|all) extras="slurm plots ccache node" ;; 0|none) extras="" ;; esac
for e in $extras; do
  case "$e" in
    slurm|plots|ccache|node) ;;
    *) echo "setup: SHARDTRAIN_SETUP_EXTRAS: unknown extra '$e' (slurm, plots, ccache, node, all, none)" >&2; exit 2 ;;
  esac
done
hide=" ${SHARDTRAIN_SETUP_HIDE:-} "
PATH="$PATH:/usr/sbin:/sbin"  # slurmd, munged live there on Debian

hidden() { [[ "$hide" == *" $1 "* ]]; }
have() { ! hidden "$1" && command -v "$1" >/dev/null 2>&1; }

# ---- apt-get ------------------------------------------------------------------------------------
apt_updated=0
apt_error=""
apt_install() {  # [--no-prompt] PACKAGE... → 0 when apt-get installed them; else apt_error says why
  local sudo=() prompt=1
  if [[ "$1" == "--no-prompt" ]]; then prompt=0; shift; fi
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || { apt_error="not root and no sudo"; return 1; }
    sudo=(sudo); [[ $prompt -eq 1 ]] || sudo=(sudo -n)
  fi
  command -v apt-get >/dev/null 2>&1 || { apt_error="no apt-get on this machine"; return 1; }
  echo "setup: apt-get install $*"
  export DEBIAN_FRONTEND=noninteractive
  local log
  log=$(mktemp)
  if [[ $apt_updated -eq 0 ]]; then
    apt_updated=1
    "${sudo[@]}" apt-get update -qq >"$log" 2>&1 || true  # offline: fails; install then says why
  fi
  if "${sudo[@]}" apt-get install -y -qq --no-install-recommends "$@" >>"$log" 2>&1; then
    rm -f "$log"; return 0
  fi
  local why
  why=$(grep -E '^(E|W):' "$log" | tail -n 1 | cut -c1-160 || true)
  apt_error="apt-get could not install them (${why:-$(tail -n 1 "$log" | cut -c1-160)})"
  rm -f "$log"
  return 1
}

# ---- needed: commands ---------------------------------------------------------------------------
cmake_ok() {  # cmake on PATH, version >= 3.25
  have cmake || return 1
  local v
  v=$(cmake --version 2>/dev/null | head -n 1 | grep -oE '[0-9]+\.[0-9]+(\.[0-9]+)?' | head -n 1)
  [[ -n "$v" ]] && [[ "$(printf '%s\n3.25\n' "$v" | sort -V | head -n 1)" == "3.25" ]]
}
cmake_found() { have cmake && cmake --version 2>/dev/null | head -n 1 | grep -oE '[0-9][0-9.]*' | head -n 1; }
cxx_ok() { if [[ -n "${CXX:-}" ]]; then have "${CXX%% *}"; else have c++ || have g++; fi; }
gen_tool() { [[ "${CMAKE_GENERATOR:-}" == Ninja* ]] && echo ninja || echo make; }

missing_tools() {  # "what|Debian package" for each missing command
  if ! cmake_ok; then
    local f; f=$(cmake_found || true)
    echo "cmake >= 3.25${f:+ (found $f)}|cmake"
  fi
  cxx_ok || echo "a C++ compiler|g++"
  local g; g=$(gen_tool)
  have "$g" || { [[ $g == ninja ]] && echo "ninja|ninja-build" || echo "make|make"; }
  have mpirun || echo "mpirun|openmpi-bin"
  have python3 || echo "python3|python3"
  return 0
}

# ---- needed: CMake packages, found by CMake itself --------------------------------------------
declare -A PKG_OF=([MPI]=libopenmpi-dev [Eigen3]=libeigen3-dev [nlohmann_json]=nlohmann-json3-dev
                   [yaml-cpp]=libyaml-cpp-dev [GTest]=libgtest-dev [PCRE2]=libpcre2-dev)
probe_dir=""
cleanup() { [[ -n "$probe_dir" ]] && rm -rf "$probe_dir"; return 0; }
trap cleanup EXIT
missing_packages() {  # "name|Debian package" for each package CMakeLists.txt's find_package would not find
  [[ -n "$probe_dir" ]] || probe_dir=$(mktemp -d "${TMPDIR:-/tmp}/st-setup-probe.XXXXXX")
  rm -rf "$probe_dir/b"
  # The same calls as CMakeLists.txt (versions, modes, components).
  cat >"$probe_dir/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.25)
project(shardtrain_setup_probe LANGUAGES CXX)
find_package(MPI QUIET COMPONENTS CXX)
find_package(Eigen3 3.3 QUIET NO_MODULE)
find_package(nlohmann_json 3 QUIET)
find_package(yaml-cpp QUIET)
find_package(GTest QUIET)
if(NOT CMAKE_DISABLE_FIND_PACKAGE_PCRE2)  # no CMake package: CMakeLists.txt's find_path / find_library
  find_path(PCRE2_INCLUDE_DIR pcre2.h)
  find_library(PCRE2_LIBRARY pcre2-8)
  if(PCRE2_INCLUDE_DIR AND PCRE2_LIBRARY)
    set(PCRE2_FOUND TRUE)
  endif()
endif()
foreach(p MPI Eigen3 nlohmann_json yaml-cpp GTest PCRE2)
  if(NOT ${p}_FOUND)
    message(STATUS "st-probe-missing ${p}")
  endif()
endforeach()
CM
  local args=() p
  for p in "${!PKG_OF[@]}"; do hidden "$p" && args+=("-DCMAKE_DISABLE_FIND_PACKAGE_$p=ON"); done
  local out
  if ! out=$(cmake -S "$probe_dir" -B "$probe_dir/b" -Wno-dev ${args[@]+"${args[@]}"} 2>&1); then
    # FindMPI fails the configure (not just MPI_FOUND) when mpicxx is there (openmpi-bin) but its
    # headers are not (libopenmpi-dev): count MPI as missing and probe the others without it.
    if grep -q 'FindMPI' <<<"$out" && rm -rf "$probe_dir/b" &&
       out=$(cmake -S "$probe_dir" -B "$probe_dir/b" -Wno-dev ${args[@]+"${args[@]}"} \
             -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON 2>&1); then
      :
    else
      echo "setup: cmake could not configure a C++ project: $(grep -m1 -E 'Error|error' <<<"$out" | cut -c1-200)" >&2
      exit 1
    fi
  fi
  local line
  while read -r line; do
    [[ "$line" =~ st-probe-missing\ ([A-Za-z0-9_-]+) ]] && echo "${BASH_REMATCH[1]}|${PKG_OF[${BASH_REMATCH[1]}]}"
  done <<<"$out"
  return 0
}

# ---- needed: check, install, check again -------------------------------------------------------
names() {  # "what|package"... → "what (Debian: package), ..."
  local m out=""
  for m in "$@"; do out+="${out:+, }${m%|*} (Debian: ${m##*|})"; done
  echo "$out"
}
ensure() {  # CHECK-FUNCTION: install what it reports missing; fail naming what stays missing
  local check="$1" list missing=() pkgs=() m
  list=$("$check")  # a failing check ends the script here (set -e)
  [[ -z "$list" ]] && return 0
  mapfile -t missing <<<"$list"
  for m in "${missing[@]}"; do pkgs+=("${m##*|}"); done
  if ! apt_install $(printf '%s\n' "${pkgs[@]}" | sort -u); then
    echo "setup: missing $(names "${missing[@]}"); $apt_error" >&2
    exit 1
  fi
  list=$("$check")
  [[ -z "$list" ]] && return 0
  mapfile -t missing <<<"$list"
  echo "setup: still missing after apt-get install: $(names "${missing[@]}")" >&2
  exit 1
}

ensure missing_tools
ensure missing_packages

# ---- optional extras ------------------------------------------------------------------------------
extra_info() {  # EXTRA → "commands|Debian packages|what it is for"
  case "$1" in
    slurm)  echo "slurmctld slurmd sbatch scontrol sinfo munged mungekey ip|slurm-wlm munge iproute2|the slurm ctests" ;;
    plots)  echo "gnuplot|gnuplot-nox|launch/plot.sh" ;;
    ccache) echo "ccache|ccache|compiler cache" ;;
    node)   echo "node npm|nodejs npm|the GPT-2 tokenizer test" ;;
  esac
}
extra_missing() {  # EXTRA → 0 when one of its commands is not found
  local info c
  info=$(extra_info "$1")
  for c in ${info%%|*}; do have "$c" || return 0; done
  return 1
}
setup_extras() {  # one apt-get install per missing extra, so one that cannot be had spoils no other
  local e info pkgs skipped="" why=""
  for e in $extras; do
    extra_missing "$e" || continue
    info=$(extra_info "$e"); info=${info#*|}; pkgs=${info%%|*}
    apt_error=""
    # shellcheck disable=SC2086
    apt_install --no-prompt $pkgs || true
    if extra_missing "$e"; then
      skipped+="${skipped:+; }$pkgs (${info#*|})"
      [[ -n "$why" ]] || why="$apt_error"
    fi
  done
  [[ -z "$skipped" ]] || echo "setup: skipped (optional): $skipped${why:+; $why}"
  return 0
}
setup_extras
