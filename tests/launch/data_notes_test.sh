#!/usr/bin/env bash
# What a run says about its data (issue 56, item 7 and 9): a token file shorter than one step
# (79 tokens at --seq-len 64 --micro-batch 4: one sequence read 4 times a step) gets a warning with
# the epochs per step and in all, and the end says the epochs run; a text file given to --data
# (short, or of any length: its bytes are no token file's magic) says it is not a token file and
# names `shardtrain prepare`; a validation loss is shown on its step even off --log-every;
# --init-from says what it loaded; prepare --val-out holds out the text's tail for --val-data.
# usage: data_notes_test.sh SHARDTRAIN
set -uo pipefail
BIN="$1"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fails=0
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
printf 'hello world, this is a tiny corpus for testing repeats in one step of training!' >"$D/tiny.txt"  # 79 bytes
"$BIN" prepare --text "$D/tiny.txt" --out "$D/tiny.bin" >/dev/null || bad "prepare"
tiny=(train --layers 1 --d-model 16 --heads 2 --log-every 100 --data "$D/tiny.bin")

"$BIN" "${tiny[@]}" --seq-len 64 --micro-batch 4 --steps 5 >"$D/a.out" 2>&1 || bad "the tiny run: $(tail -2 "$D/a.out")"
grep -qx "warning: $D/tiny.bin holds 1 sequence of 64 tokens and a step reads 4: every step repeats sequences (4 epochs a step; --steps 5 is 20 epochs)" "$D/a.out" ||
  bad "no repeat warning: $(cat "$D/a.out")"
grep -qx "data: 20 epochs over $D/tiny.bin (1 sequence of 64 tokens, 4 a step)" "$D/a.out" || bad "no epoch count: $(cat "$D/a.out")"
# 9 sequences of 8 at 2 a step: no warning; 20 steps are 40 / 9 = 4.44 epochs; validation every 7
# steps (--log-every 100): steps 7 and 14 print their line with the validation loss
"$BIN" "${tiny[@]}" --seq-len 8 --micro-batch 2 --steps 20 --val-data "$D/tiny.bin" --eval-every 7 >"$D/b.out" 2>&1 ||
  bad "the validated run: $(tail -2 "$D/b.out")"
! grep -q "^warning" "$D/b.out" && grep -qx "data: 4.44 epochs over $D/tiny.bin (9 sequences of 8 tokens, 2 a step)" "$D/b.out" ||
  bad "9 sequences: $(cat "$D/b.out")"
[[ $(grep -c '^step \(7\|14\)/20 | .* | val loss [0-9.]*$' "$D/b.out") -eq 2 && $(grep -c '^step ' "$D/b.out") -eq 3 ]] ||
  bad "validation lines off --log-every: $(grep '^step' "$D/b.out")"
# a file the run reads whole: one pass, no data line
"$BIN" "${tiny[@]}" --seq-len 8 --micro-batch 1 --steps 9 >"$D/c.out" 2>&1 && ! grep -q "^data: \|^warning" "$D/c.out" ||
  bad "one pass: $(cat "$D/c.out")"

# prepare --val-out: the text's last 10 % held out (the two files' token counts as printed, and
# together the text's bytes in order); train reads them as --data and --val-data
for _ in $(seq 20); do cat "$D/tiny.txt"; done >"$D/t20.txt"
out=$("$BIN" prepare --text "$D/t20.txt" --out "$D/t.bin" --val-out "$D/v.bin" 2>&1)
[[ "$out" == "prepare: 1580 tokens (byte tokenizer, vocab 256) from $D/t20.txt -> $D/t.bin (1422) and $D/v.bin (158, for --val-data)" ]] ||
  bad "prepare --val-out: $out"
python3 - "$D/t20.txt" "$D/t.bin" "$D/v.bin" <<'PY' || bad "prepare --val-out: the split's tokens"
import struct, sys
text = open(sys.argv[1], "rb").read()
def tokens(p):
    b = open(p, "rb").read()
    n = struct.unpack("<3i", b[:12])[2]
    return list(struct.unpack(f"<{n}H", b[1024:1024 + 2 * n]))
t, v = tokens(sys.argv[2]), tokens(sys.argv[3])
assert (len(t), len(v)) == (1422, 158) and t + v == list(text), (len(t), len(v))
PY
"$BIN" "${tiny[@]}" --data "$D/t.bin" --val-data "$D/v.bin" --seq-len 16 --micro-batch 2 --steps 2 >"$D/v.out" 2>&1 &&
  grep -q "^step 2/2 | .* | val loss [0-9.]*$" "$D/v.out" || bad "train on the split: $(cat "$D/v.out")"
out=$("$BIN" prepare --text "$D/tiny.txt" --out "$D/x.bin" --val-out "$D/xv.bin" --val-fraction 0.01 2>&1)
[[ $? -eq 2 && "$out" == "shardtrain: error: prepare: --val-fraction 0.01 of 79 tokens leaves a part under 2 tokens: more text, or another fraction" ]] ||
  bad "prepare --val-fraction too small: $out"

# --init-from says what it loaded, in one line
"$BIN" "${tiny[@]}" --seq-len 8 --micro-batch 1 --steps 2 --checkpoint-dir "$D/ck" >/dev/null 2>&1 || bad "the run to init from"
"$BIN" train --init-from "$D/ck/step_00000002" --data "$D/tiny.bin" --seq-len 8 --micro-batch 1 --steps 1 >"$D/i.out" 2>&1 ||
  bad "--init-from: $(tail -2 "$D/i.out")"
grep -qx "initialised from $D/ck/step_00000002: the weights of all 7536 parameters (the optimizer state, step count and data order start fresh)" "$D/i.out" ||
  bad "--init-from: $(cat "$D/i.out")"

# text given to --data: short, and long enough for a header (its first bytes are text, no magic)
for f in "$D/tiny.txt" "$D/long.txt"; do
  [[ "$f" == "$D/long.txt" ]] && for _ in $(seq 40); do cat "$D/tiny.txt"; done >"$D/long.txt"
  out=$("$BIN" "${tiny[@]}" --steps 1 --data "$f" 2>&1)
  [[ $? -eq 1 && $(wc -l <<<"$out") -eq 1 && "$out" == *"not a token file"* &&
     "$out" == *'to train on a text file, make one with `shardtrain prepare --text FILE --out FILE.bin`' ]] ||
    bad "--data $(basename "$f"): $out"
done

[[ $fails -eq 0 ]] && echo "data notes test passed" || exit 1
