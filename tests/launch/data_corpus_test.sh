#!/usr/bin/env bash
# prepare → train --data DIR, end to end through the binary. prepare: one final line when stdout is
# not a terminal, a progress line on one (script(1)); killed (SHARDTRAIN_TEST_PREPARE_KILL_SHARDS) and run again = one run, byte for
# byte. train: a prepare directory of shards gives the losses of the one file that concatenates
# them (bit for bit); a mixture DIR:0.7,FILE:0.3 gives the same losses under dp 2 (1e-5) and when
# resumed (bit for bit) as in one process; --val-data DIR/val validates (--eval-tokens: how much); a shard with an id ≥ the
# vocabulary or a truncated tail is refused naming the shard.
# usage: data_corpus_test.sh MPIEXEC SHARDTRAIN
set -uo pipefail
MPIEXEC="$1" BIN="$2"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
MPI=("$MPIEXEC" --oversubscribe --allow-run-as-root)
fails=0
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
small=(train --layers 2 --d-model 32 --heads 4 --seq-len 16 --micro-batch 2 --grad-accum 2 --lr 3e-3 --log-every 100)
runq() { "$@" >"$D/last.out" 2>&1 || bad "exit $?: $* : $(tail -3 "$D/last.out")"; }
compare() {  # compare A.jsonl B.jsonl RTOL WHAT: the same losses and grad norms step for step
  python3 - "$@" <<'PY' || bad "$4"
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
rtol = float(sys.argv[3])
assert [r["step"] for r in a] == [r["step"] for r in b], ([r["step"] for r in a], [r["step"] for r in b])
for x, y in zip(a, b):
    for k in ("loss", "grad_norm"):
        assert abs(x[k] - y[k]) <= rtol * abs(x[k]), f"{sys.argv[4]}: step {x['step']} {k} {x[k]} vs {y[k]}"
PY
}

# a corpus: 40 JSONL documents and a text file
mkdir -p "$D/in"
python3 - "$D/in" <<'PY'
import json, sys
with open(sys.argv[1] + "/docs.jsonl", "w") as f:
    for i in range(40):
        f.write(json.dumps({"text": " ".join(f"word{(i * 7 + k) % 50}" for k in range(20 + i % 30))}) + "\n")
open(sys.argv[1] + "/notes.txt", "w").write("A plain text document.\n" * 20)
PY
prep=(prepare --input "$D/in/docs.jsonl" --input "$D/in/notes.txt" --eos-id 0 --shard-tokens 3000 --threads 2)
out=$("$BIN" "${prep[@]}" --out "$D/c" --val-docs 4 2>&1) || bad "prepare failed: $out"
[[ "$(printf '%s\n' "$out" | wc -l)" == 1 && "$out" == "prepare: 37 documents, "*" shard(s) + val/: 4 documents, "*"-> $D/c (train --data $D/c)" ]] ||
  bad "prepare's line (stdout not a terminal: one line): $out"
# on a terminal (script(1) gives it one): the progress line, redrawn with \r, then the final line
script -qec "$BIN ${prep[*]} --out $D/tty" /dev/null >"$D/tty.out" 2>&1 || bad "prepare on a terminal failed: $(cat "$D/tty.out")"
grep -q $'\rprepare: [0-9.]* / [0-9.]* MB (100%), [0-9.]* MB/s, 41 documents' "$D/tty.out" ||
  bad "no progress line on a terminal: $(cat -v "$D/tty.out")"
nshards=$(python3 -c "import json; print(len(json.load(open('$D/c/index.json'))['shards']))")
[[ "$nshards" -ge 3 ]] || bad "expected 3 or more shards, got $nshards"

# killed after its 2nd shard, then run again: the bytes of one run
SHARDTRAIN_TEST_PREPARE_KILL_SHARDS=2 "$BIN" "${prep[@]}" --out "$D/k" --val-docs 4 >/dev/null 2>&1
rc=$?
[[ $rc == 137 && ! -e "$D/k/index.json" && -e "$D/k/shard_000001.bin" ]] || bad "the kill hook: rc $rc, $(ls "$D/k")"
runq "$BIN" "${prep[@]}" --out "$D/k" --val-docs 4
diff -r "$D/c" "$D/k" >/dev/null || bad "prepare killed and run again differs from one run"

# the shards concatenated into one file: the same losses, bit for bit
python3 - "$D/c" "$D/all.bin" <<'PY'
import json, struct, sys
d, out = sys.argv[1:]
idx = json.load(open(d + "/index.json"))
body = b"".join(open(d + "/" + s["file"], "rb").read()[1024:] for s in idx["shards"])
hdr = struct.pack("<3i", 20240520, 1, len(body) // 2) + bytes(1012)
open(out, "wb").write(hdr + body)
PY
runq "$BIN" "${small[@]}" --steps 4 --data "$D/c" --metrics "$D/dir.jsonl"
runq "$BIN" "${small[@]}" --steps 4 --data "$D/all.bin" --metrics "$D/file.jsonl"
compare "$D/dir.jsonl" "$D/file.jsonl" 0 "a prepare directory differs from its concatenated file"

# a mixture: one process, dp 2, a resume; validation on val/
mix="$D/c:0.7,$D/all.bin:0.3"
runq "$BIN" "${small[@]}" --shuffle 1 --steps 6 --data "$mix" --val-data "$D/c/val" --eval-every 3 --metrics "$D/mix.jsonl"
python3 -c "
import json
rows = [json.loads(l) for l in open('$D/mix.jsonl')]
assert [r['step'] for r in rows if r.get('val_loss') is not None] == [3, 6], rows" || bad "no validation loss at steps 3 and 6"
# --eval-tokens: 256 = 8 micro-batches of 2 × 16, the default's, bit for bit; 32 (one micro-batch) another loss
runq "$BIN" "${small[@]}" --shuffle 1 --steps 3 --data "$mix" --val-data "$D/c/val" --eval-every 3 --metrics "$D/ev0.jsonl"
runq "$BIN" "${small[@]}" --shuffle 1 --steps 3 --data "$mix" --val-data "$D/c/val" --eval-every 3 --eval-tokens 256 --metrics "$D/ev256.jsonl"
runq "$BIN" "${small[@]}" --shuffle 1 --steps 3 --data "$mix" --val-data "$D/c/val" --eval-every 3 --eval-tokens 32 --metrics "$D/ev32.jsonl"
python3 -c "
import json
val = lambda p: [json.loads(l) for l in open(p)][2]['val_loss']
a, b, c = val('$D/ev0.jsonl'), val('$D/ev256.jsonl'), val('$D/ev32.jsonl')
assert a == b and a != c, (a, b, c)" || bad "--eval-tokens 256 differs from the default 8 micro-batches, or 32 does not"
runq "${MPI[@]}" -np 2 "$BIN" "${small[@]}" --shuffle 1 --steps 6 --data "$mix" --dp 2 --grad-accum 1 --metrics "$D/mix_dp2.jsonl"
compare "$D/mix.jsonl" "$D/mix_dp2.jsonl" 1e-5 "a mixture under dp 2 differs from one process"
runq "$BIN" "${small[@]}" --shuffle 1 --steps 3 --data "$mix" --checkpoint-dir "$D/ck" --metrics "$D/mix_resumed.jsonl"
runq "$BIN" "${small[@]}" --shuffle 1 --steps 6 --data "$mix" --checkpoint-dir "$D/ck" --resume 1 --metrics "$D/mix_resumed.jsonl"
compare "$D/mix.jsonl" "$D/mix_resumed.jsonl" 0 "a mixture resumed at step 3 differs from one run"
runq "$BIN" "${small[@]}" --steps 1 --data "$D/c:0.5,$D/all.bin:0.5" --metrics "$D/mix_other.jsonl"
python3 -c "
import json
a = json.loads(open('$D/mix.jsonl').readline())['loss']; b = json.loads(open('$D/mix_other.jsonl').readline())['loss']
assert a != b, (a, b)" || bad "another mixture reads the same first step"

# refusals that name the shard
cp -r "$D/c" "$D/big"
python3 - "$D/big/shard_000001.bin" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[1024 + 10:1024 + 12] = (300).to_bytes(2, "little")  # an id past the byte vocabulary
open(p, "wb").write(b)
PY
out=$("$BIN" "${small[@]}" --steps 1 --data "$D/big" 2>&1)
[[ $? -ne 0 && "$out" == *"$D/big/shard_000001.bin holds token id 300, outside the model's vocabulary of 256"* ]] ||
  bad "an id past the vocabulary is not refused naming the shard: $out"
cp -r "$D/c" "$D/cut"
truncate -s -1 "$D/cut/shard_000002.bin"
out=$("$BIN" "${small[@]}" --steps 1 --data "$D/cut" 2>&1)
[[ $? -ne 0 && "$out" == *"token file $D/cut/shard_000002.bin: header says "*"(truncated)"* ]] ||
  bad "a truncated shard is not refused naming it: $out"
out=$("$BIN" "${small[@]}" --steps 1 --data "$D/in" 2>&1)
[[ $? -ne 0 && "$out" == *"--data (from command line): $D/in is a directory without index.json ($D/in/index.json)"* ]] || bad "a directory that is not a corpus is not refused naming index.json: $out"

[[ $fails == 0 ]] && echo "data corpus: all checks passed"
exit $((fails > 0))
