#!/usr/bin/env bash
# Issue 31, Deliver 6: shardtrain's Llama at the Llama-3.2-1B shape (16 layers, C 2048, 32 heads
# over 8 key/value heads, FFN 8192, vocabulary 128256, tied head, rope theta 500000 with Llama 3's
# scaling) against transformers' LlamaForCausalLM in fp32: 5 AdamW steps from the same random
# weights on the same batches, each step's loss within 1e-6 relative, the grad norm within 1e-6 at step 1 and 1e-4 after
# (launch/gpu/llama_full_fidelity.py says what each side runs and why the bounds).
#   usage: launch/gpu/llama_full_fidelity.sh [BUILD] [OUT]        (defaults: build, ./llama_fid_out)
# Builds nothing: BUILD must hold a built `shardtrain` (the CUDA build for DEVICE cuda). Needs
# python3 with torch, transformers and numpy. Runs one after the other, never both at once:
#   1. torch: build + save_pretrained the model, write the tokens, 5 steps (reference.json)
#   2. shardtrain train --init-from the saved folder, the same flags (metrics.jsonl)
#   3. the comparison table → OUT/summary.txt; exit 1 when a bound is exceeded
# OUT keeps summary.txt, reference.json, metrics.jsonl and the two logs; the 5 GB model folder and
# the tokens go to a temporary folder (WORK, default under /tmp), removed at the end unless KEEP=1.
# Env: SHAPE (1b | tiny: a 2-layer miniature with the same features, seconds on a CPU), DEVICE
# (cuda | cpu), LAYERS D_MODEL HEADS KV_HEADS HEAD_DIM FFN VOCAB B T STEPS SEED LR (override the
# shape's), EXTRA (more shardtrain flags, e.g. "--cuda-graph 0"), BUDGET_S (570: every stage's
# time cap is cut to what is left of it), PYTHON (python3).
# On an H100 / H200 at the 1B shape (B 2, T 1024): torch about 20 GB of weights, gradients and
# moments plus its activations (eager attention keeps 16 × (2, 32, 1024, 1024) f32 probabilities),
# peak about 35 GiB; shardtrain about the same; a few minutes in all, most of it writing and
# reading the 5 GB safetensors.
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${1:-build}
OUT=${2:-llama_fid_out}
SHAPE=${SHAPE:-1b}
DEVICE=${DEVICE:-cuda}
PYTHON=${PYTHON:-python3}
BUDGET_S=${BUDGET_S:-570}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=${WORK:-$(mktemp -d /tmp/llama_fid.XXXXXX)}
mkdir -p "$WORK"
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$WORK"' EXIT
export PYTHONUNBUFFERED=1
summary="$OUT/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
cap() { local c=$(( BUDGET_S - SECONDS )); [ "$1" -lt "$c" ] && c=$1; echo $(( c > 5 ? c : 5 )); }
ST="$BUILD/shardtrain"
[ -x "$ST" ] || { note "llama_full_fidelity: no $ST (build the shardtrain target first)"; exit 1; }

note "date $(date -u +%FT%TZ)  commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}  shape $SHAPE  device $DEVICE"
[ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$summary"

# the shape's overrides, passed only when set
over=()
for v in LAYERS:layers D_MODEL:d-model HEADS:heads KV_HEADS:kv-heads HEAD_DIM:head-dim FFN:ffn VOCAB:vocab \
         B:batch T:seq-len STEPS:steps SEED:seed LR:lr; do
  name=${v%%:*}
  [ -n "${!name:-}" ] && over+=("--${v#*:}" "${!name}")
done

# 1. transformers in torch: the weights, the tokens, the reference steps
t0=$SECONDS
timeout "$(cap 300)" "$PYTHON" launch/gpu/llama_full_fidelity.py reference "$WORK" --shape "$SHAPE" \
  --device "$DEVICE" "${over[@]}" > "$OUT/torch.log" 2>&1
rc=$?
note "torch reference rc=$rc ($((SECONDS - t0)) s)"
grep -E "parameters|torch step|peak" "$OUT/torch.log" | tee -a "$summary"
[ $rc -eq 0 ] || { tail -20 "$OUT/torch.log" | tee -a "$summary"; exit 1; }
cp "$WORK/reference.json" "$OUT/reference.json"

# 2. shardtrain with the same flags (reference.json's shardtrain_flags), after torch has exited
mapfile -t flags < <("$PYTHON" -c 'import json, sys; print("\n".join(json.load(open(sys.argv[1]))["shardtrain_flags"]))' \
  "$OUT/reference.json")
rm -f "$OUT/metrics.jsonl"
t0=$SECONDS
# shellcheck disable=SC2086  # EXTRA is a list of flags
timeout "$(cap 300)" "$ST" train "${flags[@]}" --device "$DEVICE" --metrics "$OUT/metrics.jsonl" --log-every 1 \
  --progress 0 ${EXTRA:-} > "$OUT/shardtrain.log" 2>&1
rc=$?
note "shardtrain train rc=$rc ($((SECONDS - t0)) s): $ST train ${flags[*]} --device $DEVICE ${EXTRA:-}"
{ grep -E "^model" "$OUT/shardtrain.log"; grep -E "^step " "$OUT/shardtrain.log" | tail -1
  grep -A1 -E "^rank +params" "$OUT/shardtrain.log"; } | tee -a "$summary"
[ $rc -eq 0 ] || { tail -20 "$OUT/shardtrain.log" | tee -a "$summary"; exit 1; }

# 3. the table and the verdict
"$PYTHON" launch/gpu/llama_full_fidelity.py compare "$OUT/reference.json" "$OUT/metrics.jsonl" 2>&1 | tee -a "$summary"
exit "${PIPESTATUS[0]}"
