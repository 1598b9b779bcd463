#!/usr/bin/env bash
# The corruption probes under the layouts that read parts of tensors (docs/testing.md, "Faults
# and bad input"): a checkpoint written under a layout, one bit flipped in one tensor (in the
# file the index names for it), then resumed under the same layout. Before every read was
# checked by chunk, each resumed silently and wrote a new checkpoint with fresh checksums over
# the damage. Each must stop before training: exit != 0, one error line naming the file and
# the tensor (one line, or one per rank that met it: error lines naming anything else fail), no
# new step directory.
#   tp 2 (np 2)                model: a column-split c_attn weight; optimizer: a c_fc moment
#   zero 3, dp 2 (np 2)        model: wte (each rank a window); optimizer: a c_attn moment
#   pp 2 x tp 2 (np 4)         stage 1's model shard file; stage 1's optimizer shard file
#   pp 2 x zero 3 dp 2 (np 4)  the same
#   tp 2: a header edit (the offsets of two tensors of one size swapped), named at open
# Prints one line per probe: "probe <layout> <file kind> <tensor>: refused|SILENT".
# Usage: checkpoint_probes.sh MPIEXEC SHARDTRAIN
set -uo pipefail
MPIEXEC="$1" BIN="$2"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
export SHARDTRAIN_PROGRESS=0
MPI=("$MPIEXEC" --oversubscribe --allow-run-as-root)
small=(train --layers 2 --d-model 32 --heads 2 --seq-len 16 --micro-batch 2 --grad-accum 2 --log-every 100 --timeout-s 60)
fails=0
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# flip DIR BASE TENSOR [swap TENSOR2]: one bit in the middle of TENSOR's bytes in the file of
# DIR/BASE's index (or DIR/BASE.safetensors); with "swap", the header's offsets of the two
# tensors exchanged instead. Prints the file's path.
flip() {
  python3 - "$@" <<'PY'
import json, os, struct, sys
d, base, name = sys.argv[1:4]
index = os.path.join(d, base + ".safetensors.index.json")
path = os.path.join(d, json.load(open(index))["weight_map"][name] if os.path.exists(index) else base + ".safetensors")
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
    if len(sys.argv) > 5 and sys.argv[4] == "swap":
        other = sys.argv[5]
        h[name]["data_offsets"], h[other]["data_offsets"] = h[other]["data_offsets"], h[name]["data_offsets"]
        text = json.dumps(h, separators=(",", ":")).encode()
        text += b" " * (n - len(text))
        assert len(text) == n
        f.seek(8)
        f.write(text)
    else:
        b, e = h[name]["data_offsets"]
        at = 8 + n + (b + e) // 2
        f.seek(at)
        c = f.read(1)[0]
        f.seek(at)
        f.write(bytes([c ^ 0x20]))
print(path)
PY
}

# probe NAME NP "LAYOUT FLAGS" BASE TENSOR [swap TENSOR2]
probe() {
  local name="$1" np="$2" layout="$3"
  shift 3
  local dir="$D/${name// /_}_$RANDOM"
  cp -r "$D/orig_${np}_${layout// /_}" "$dir" || { bad "$name: no checkpoint to copy"; return; }
  local file
  file=$(flip "$dir/step_00000002" "$@") || { bad "$name: flip failed"; return; }
  local out rc t0=$SECONDS
  # shellcheck disable=SC2086
  out=$(timeout 120 "${MPI[@]}" -np "$np" "$BIN" "${small[@]}" $layout --steps 4 --checkpoint-dir "$dir" --resume 1 2>&1)
  rc=$?
  local named="tensor '$2'" lines others
  [[ "${3:-}" == swap ]] && named="tensor '($2|$4)'"  # the first of the two in the file's order
  lines=$(grep -c "shardtrain: error: " <<<"$out")
  others=$(grep "shardtrain: error: " <<<"$out" | grep -cvE "shardtrain: error: safetensors $file: $named")
  if [[ $rc -ne 0 && $rc -ne 124 && $lines -ge 1 && $others -eq 0 ]] && [[ "$(ls "$dir")" == "step_00000002" ]]; then
    echo "probe $name $1 $2: refused in $((SECONDS - t0)) s: $(grep -m1 'shardtrain: error' <<<"$out" | cut -c1-220)"
  else
    echo "probe $name $1 $2: SILENT or wrong (exit $rc, $lines error lines, steps: $(ls "$dir" | tr '\n' ' '))"
    bad "$name $1 $2"
    echo "$out" | tail -5
  fi
}

write() {  # write NP "LAYOUT FLAGS": step 2 of the small GPT under that layout
  local np="$1" layout="$2"
  # shellcheck disable=SC2086
  "${MPI[@]}" -np "$np" "$BIN" "${small[@]}" $layout --steps 2 --checkpoint-dir "$D/orig_${np}_${layout// /_}" >"$D/write.log" 2>&1 ||
    { bad "writing under $layout failed"; cat "$D/write.log"; }
}

h0=transformer.h.0 h1=transformer.h.1
write 2 "--tp 2"
probe "tp2" 2 "--tp 2" model "$h1.attn.c_attn.weight"
probe "tp2" 2 "--tp 2" optimizer "exp_avg.$h0.mlp.c_fc.weight"
probe "tp2-header" 2 "--tp 2" model "$h0.ln_1.weight" swap "$h0.ln_2.weight"
write 2 "--dp 2 --zero 3"
probe "zero3" 2 "--dp 2 --zero 3" model transformer.wte.weight
probe "zero3" 2 "--dp 2 --zero 3" optimizer "exp_avg_sq.$h0.attn.c_attn.weight"
write 4 "--pp 2 --tp 2"
probe "pp2xtp2" 4 "--pp 2 --tp 2" model "$h1.mlp.c_fc.weight"
probe "pp2xtp2" 4 "--pp 2 --tp 2" optimizer "exp_avg.$h1.mlp.c_proj.weight"
write 4 "--pp 2 --dp 2 --zero 3"
probe "pp2xzero3" 4 "--pp 2 --dp 2 --zero 3" model "$h1.attn.c_proj.weight"
probe "pp2xzero3" 4 "--pp 2 --dp 2 --zero 3" optimizer "exp_avg_sq.$h1.mlp.c_fc.weight"
[[ $fails -eq 0 ]] && echo PASS
exit $fails
