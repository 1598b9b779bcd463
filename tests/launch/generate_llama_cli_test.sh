#!/usr/bin/env bash
# `shardtrain generate` on a Llama checkpoint as a user runs it: a tiny Llama (grouped-query heads
# 4 over 2, rope theta 500000, SwiGLU, an untied head) trained 20 steps on byte tokens of a text,
# then greedy generation of a batch of prompts with the KV cache in one process, and under
# mpirun --tp 2 (a key/value head per rank) and --pp 2: each prints what one process prints,
# token for token. usage: generate_llama_cli_test.sh MPIEXEC SHARDTRAIN TEXT
set -uo pipefail
MPIEXEC="$1"; BIN="$2"; TEXT="$3"
W="$(mktemp -d)"; trap 'rm -rf "$W"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
MPI=("$MPIEXEC" --oversubscribe --allow-run-as-root)
"$BIN" prepare --text "$TEXT" --out "$W/t.bin" >/dev/null || fail prepare
"$BIN" train --model llama --layers 2 --d-model 32 --heads 4 --kv-heads 2 --ffn 64 --rope-theta 500000 \
  --tie-embeddings 0 --vocab 256 --seq-len 32 --steps 20 --lr 0.01 --micro-batch 4 --data "$W/t.bin" \
  --checkpoint-dir "$W/ck" --progress 0 >/dev/null 2>&1 || fail train
G=(generate --checkpoint "$W/ck" --prompt "It was" --prompt "the best of" --prompt "a" --max-new-tokens 16)
"$BIN" "${G[@]}" >"$W/one.txt" 2>"$W/err.txt" || fail "one process: $(cat "$W/err.txt")"
[[ $(wc -l <"$W/one.txt") -ge 3 ]] || fail "one process printed $(cat "$W/one.txt")"
for layout in "--tp 2" "--pp 2"; do
  timeout 120 "${MPI[@]}" -np 2 "$BIN" "${G[@]}" $layout >"$W/mp.txt" 2>"$W/mp_err.txt" ||
    fail "mpirun -np 2 $layout: $(tail -3 "$W/mp_err.txt")"
  cmp -s "$W/one.txt" "$W/mp.txt" || fail "$layout printed $(cat "$W/mp.txt"), one process $(cat "$W/one.txt")"
done
echo PASS
