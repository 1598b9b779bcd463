#!/usr/bin/env bash
# Hugging Face tokenizer.json through the CLI, against Hugging Face's own tokenizers library
# (the npm package tokenizers@0.23.2, installed into CACHE once, as gpt2_vocab.sh does):
#   0. tests/fixtures/make_hf_tokenizers.js --check: the committed fixture is what the script makes;
#   1. per form (llama3, gpt2, spm, metaspace): `prepare --tokenizer DIR` (and the file's own path)
#      writes the library's encode() ids of train.txt (cases.json's train_ids), token for token,
#      then the EOS id (cases.json's eos: the library's token_to_id of the form's end token);
#   2. `generate --tokenizer DIR` over a tiny GPT trained 3 steps on those tokens (vocabulary 1000,
#      sampled at temperature 1 so that special tokens and byte pieces come up): the prompt's ids
#      are the library's, stdout is the prompt and the library's decode(new ids, skip special);
#      the same without --tokenizer once the checkpoint folder holds the tokenizer.json, which the
#      console names;
#   3. a model smaller than the tokenizer, and a --tokenizer that is no tokenizer, end with one line;
#   4. GPT-2's real vocabulary (50 257 tokens, 50 000 merges in the "a b" spelling; gpt2_vocab.sh)
#      as a tokenizer.json: `prepare` gives the library's ids of tests/launch/gpt2_texts.
# Skips (77) only without node/npm. usage: hf_tokenizer_cli_test.sh SHARDTRAIN CACHE REPO GPT2_CACHE
set -uo pipefail
declare -A EOS
BIN="$1"; CACHE="$2"; REPO="$3"; GPT2_CACHE="$4"
FIX="$REPO/tests/fixtures/hf_tokenizers"
for tool in node npm; do
  command -v "$tool" >/dev/null 2>&1 ||
    { echo "SKIPPED: '$tool' not found: the reference is the npm package tokenizers (launch/setup.sh installs nodejs and npm)"; exit 77; }
done
if [[ ! -f "$CACHE/node_modules/tokenizers/package.json" ]]; then
  mkdir -p "$CACHE"
  npm install --prefix "$CACHE" --no-audit --no-fund --loglevel=error tokenizers@0.23.2 ||
    { echo "FAILED: npm install tokenizers@0.23.2 into $CACHE" >&2; exit 1; }
fi
export NODE_PATH="$CACHE/node_modules"
W="$(mktemp -d)"; trap 'rm -rf "$W"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 0. the fixture is the script's
node "$REPO/tests/fixtures/make_hf_tokenizers.js" "$FIX" --check || fail "tests/fixtures/hf_tokenizers differs from what make_hf_tokenizers.js makes"

# token file → JSON list of ids (llm.c's header: 256 int32, version 1 uint16 / 2 uint32)
ids_of() { python3 -c '
import json, struct, sys
b = open(sys.argv[1], "rb").read()
h = struct.unpack("<256i", b[:1024])
fmt = {1: "H", 2: "I"}[h[1]]
print(json.dumps(list(struct.unpack("<%d%s" % (h[2], fmt), b[1024:]))))' "$1"; }
want() { python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))[sys.argv[2]][sys.argv[3]]))' "$FIX/cases.json" "$@"; }
# the text as one document: the library's encode(text) ids (BOS from the template), then EOS
EOS=([llama3]=$(want llama3 eos) [gpt2]=$(want gpt2 eos) [spm]=$(want spm eos) [metaspace]=$(want metaspace eos))

PROMPT="$(head -n 1 "$FIX/train.txt")"  # one of cases.json's texts
for form in llama3 gpt2 spm metaspace; do
  # 1. prepare
  "$BIN" prepare --text "$FIX/train.txt" --out "$W/$form.bin" --tokenizer "$FIX/$form" >"$W/prep.txt" || fail "$form: prepare"
  grep -q "tokens ($FIX/$form tokenizer)" "$W/prep.txt" || fail "$form: prepare's line: $(cat "$W/prep.txt")"
  [[ "$(ids_of "$W/$form.bin")" == "$(python3 -c 'import json, sys; print(json.dumps(json.loads(sys.argv[1]) + [int(sys.argv[2])]))' "$(want "$form" train_ids)" "${EOS[$form]}")" ]] ||
    fail "$form: prepare's ids are not the library's encode(train.txt) and EOS ${EOS[$form]}"
  "$BIN" prepare --text "$FIX/train.txt" --out "$W/$form.file.bin" --tokenizer "$FIX/$form/tokenizer.json" >/dev/null || fail "$form: prepare FILE"
  cmp -s "$W/$form.bin" "$W/$form.file.bin" || fail "$form: --tokenizer DIR and --tokenizer DIR/tokenizer.json differ"
  # the same text as a corpus of one document: [BOS] encode(text, no specials) [EOS], the ids above
  "$BIN" prepare --input "$FIX/train.txt" --out "$W/corpus_$form" --tokenizer "$FIX/$form" >/dev/null || fail "$form: prepare --input"
  [[ "$(ids_of "$W/corpus_$form/shard_000000.bin")" == "$(ids_of "$W/$form.bin")" ]] ||
    fail "$form: a corpus of train.txt is not [BOS] + the library's ids + [EOS] as prepare --text writes them"
  # 2. generate
  "$BIN" train --model gpt --vocab 1000 --layers 1 --d-model 16 --heads 2 --seq-len 96 --steps 3 --lr 0.01 \
    --data "$W/$form.bin" --checkpoint-dir "$W/ck_$form" --micro-batch 2 >/dev/null 2>&1 || fail "$form: train"
  "$BIN" generate --checkpoint "$W/ck_$form" --tokenizer "$FIX/$form" --prompt "$PROMPT" --max-new-tokens 40 \
    --temperature 1 --seed 5 --ids-out "$W/ids_$form.json" >"$W/out_$form.txt" 2>"$W/err.txt" || fail "$form: generate: $(cat "$W/err.txt")"
  node - "$FIX/$form/tokenizer.json" "$W/ids_$form.json" "$PROMPT" "$W/out_$form.txt" <<'JS' || fail "$form: generate's ids or text are not the library's"
const [file, idsFile, prompt, outFile] = process.argv.slice(2);
const fs = require('fs');
const { Tokenizer } = require('tokenizers');
(async () => {
  const tok = Tokenizer.fromFile(file);
  const ids = JSON.parse(fs.readFileSync(idsFile, 'utf8'));
  const want = JSON.stringify((await tok.encode(prompt)).getIds());
  if (JSON.stringify(ids.prompts[0]) !== want) { console.log('prompt ids', JSON.stringify(ids.prompts[0]), 'library', want); process.exit(1); }
  if (ids.tokens[0].length !== 40) { console.log('tokens', ids.tokens[0].length); process.exit(1); }
  const text = prompt + (await tok.decode(ids.tokens[0], true)) + '\n';
  const out = fs.readFileSync(outFile, 'utf8');
  if (out !== text) { console.log('stdout', JSON.stringify(out), 'library', JSON.stringify(text)); process.exit(1); }
})().catch((e) => { console.error(e); process.exit(1); });
JS
  # the checkpoint folder's own tokenizer.json, used without --tokenizer and named on the console
  cp "$FIX/$form/tokenizer.json" "$W/ck_$form/"
  "$BIN" generate --checkpoint "$W/ck_$form" --prompt "$PROMPT" --max-new-tokens 40 --temperature 1 --seed 5 \
    >"$W/auto.txt" 2>"$W/err.txt" || fail "$form: generate with the folder's tokenizer: $(cat "$W/err.txt")"
  grep -q "^generate: tokenizer $W/ck_$form/tokenizer.json (the model folder's; --tokenizer chooses another)$" "$W/err.txt" ||
    fail "$form: no console line naming the folder's tokenizer: $(cat "$W/err.txt")"
  cmp -s "$W/auto.txt" "$W/out_$form.txt" || fail "$form: the folder's tokenizer printed another text"
done

# 3. one-line errors
expect_error() {  # MESSAGE CMD...
  local msg="$1"; shift
  "$@" >"$W/o.txt" 2>"$W/e.txt" && fail "exit 0: $*"
  grep -qF -- "$msg" "$W/e.txt" || fail "expected '$msg', got: $(cat "$W/e.txt")"
}
"$BIN" prepare --text "$FIX/train.txt" --out "$W/b.bin" >/dev/null || fail "byte prepare"
"$BIN" train --model gpt --vocab 500 --layers 1 --d-model 16 --heads 2 --seq-len 16 --steps 1 \
  --data "$W/b.bin" --checkpoint-dir "$W/small" --micro-batch 2 >/dev/null 2>&1 || fail "train vocab 500"
expect_error "$FIX/llama3/tokenizer.json holds 877 tokens, more than the model's vocabulary of 500" \
  "$BIN" generate --checkpoint "$W/small" --tokenizer "$FIX/llama3" --prompt a
expect_error "--tokenizer: expected byte, gpt2, a tokenizer.json or a directory holding one, got '$W'" \
  "$BIN" generate --checkpoint "$W/small" --tokenizer "$W" --prompt a
expect_error "expected byte, gpt2, a tokenizer.json or a directory holding one, got 'nope'" \
  "$BIN" prepare --text "$FIX/train.txt" --out "$W/x.bin" --tokenizer nope

# 4. GPT-2's own files as a tokenizer.json, at full size
"$REPO/tests/launch/gpt2_vocab.sh" "$GPT2_CACHE" >/dev/null || fail "gpt2_vocab.sh"
mkdir -p "$W/gpt2real"
node - "$GPT2_CACHE/gpt2" "$W/gpt2real/tokenizer.json" <<'JS' || fail "GPT-2's tokenizer.json"
const [dir, out] = process.argv.slice(2);
const fs = require('fs');
const merges = fs.readFileSync(dir + '/merges.txt', 'utf8').split('\n').filter((l) => l && !l.startsWith('#version'));
const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
fs.writeFileSync(out, JSON.stringify({ version: '1.0', truncation: null, padding: null,
  added_tokens: [{ id: 50256, content: '<|endoftext|>', single_word: false, lstrip: false, rstrip: false, normalized: true, special: true }],
  normalizer: null, pre_tokenizer: byteLevel, post_processor: byteLevel, decoder: byteLevel,
  model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '', end_of_word_suffix: '', fuse_unk: false,
           byte_fallback: false, vocab: JSON.parse(fs.readFileSync(dir + '/vocab.json', 'utf8')), merges } }));
JS
for t in "$REPO"/tests/launch/gpt2_texts/*.txt; do
  "$BIN" prepare --text "$t" --out "$W/g.bin" --tokenizer "$W/gpt2real" >/dev/null || fail "prepare $t with GPT-2's tokenizer.json"
  node - "$W/gpt2real/tokenizer.json" "$t" "$(ids_of "$W/g.bin")" <<'JS' || fail "GPT-2's ids of $t are not the library's"
const [file, text, got] = process.argv.slice(2);
const { Tokenizer } = require('tokenizers');
(async () => {
  const ids = (await Tokenizer.fromFile(file).encode(require('fs').readFileSync(text, 'utf8'))).getIds().concat([50256]);
  if (JSON.stringify(ids) !== JSON.stringify(JSON.parse(got))) { console.log('ours', got.slice(0, 200), 'library', JSON.stringify(ids).slice(0, 200)); process.exit(1); }
})();
JS
done
echo PASS
