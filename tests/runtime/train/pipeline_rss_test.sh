#!/usr/bin/env bash
# A pipeline stage holds only its layers: under --pp 4 every rank's peak resident set (VmHWM, the
# "rss peak" column of the memory table `shardtrain train` prints at the end) is at most 0.35×
# that of one process training the same ≥ 100 M-parameter GPT (16 blocks of d 768, V 8192: 119.7 M;
# one step of 4 micro-batches of 1 × 32 tokens, CPU). Measured 2026-12-03: one process 2096 MiB,
# pp 4 ranks 664 / 576 / 526 / 616 MiB (0.32×) — the closed form is a quarter of the
# parameters, gradients and AdamW moments (457 + 457 + 913 MiB) plus each process's own
# libraries and buffers, with the embedding and the head's own copy of the tied wte on the end
# stages (docs/PERFORMANCE.md).
# usage: pipeline_rss_test.sh MPIEXEC SHARDTRAIN_BIN
set -euo pipefail
MPIEXEC="$1"
BIN="$2"
ARGS=(train --model gpt --layers 16 --d-model 768 --heads 12 --vocab 8192 --seq-len 32 --micro-batch 1
      --grad-accum 4 --steps 1 --progress 0)

# rss peak (MiB) of each rank from the table's rows
rss_column() { awk '/^memory per rank/ {t = 1; next} t && $1 ~ /^[0-9]+$/ {print $7}'; }

one=$("$BIN" "${ARGS[@]}" 2>&1) || { echo "one process failed:"; echo "$one"; exit 1; }
params=$(echo "$one" | sed -n 's/^model gpt: \([0-9]*\) parameters.*/\1/p')
(( params >= 100000000 )) || { echo "the model has $params parameters, not ≥ 100 M"; exit 1; }
base=$(echo "$one" | rss_column)
[[ -n "$base" ]] || { echo "no memory table:"; echo "$one"; exit 1; }

pp=$("$MPIEXEC" -np 4 --oversubscribe --allow-run-as-root "$BIN" "${ARGS[@]}" --pp 4 2>&1) ||
  { echo "pp 4 failed:"; echo "$pp"; exit 1; }
ranks=$(echo "$pp" | rss_column)
[[ $(echo "$ranks" | wc -l) == 4 ]] || { echo "expected 4 rows:"; echo "$pp"; exit 1; }
echo "one process: $params parameters, rss peak $base MiB; pp 4 ranks: $(echo $ranks) MiB"
for r in $ranks; do
  awk -v r="$r" -v b="$base" 'BEGIN { exit !(r <= 0.35 * b) }' ||
    { echo "a pp 4 rank peaked at $r MiB, more than 0.35 × $base MiB"; echo "$pp"; exit 1; }
done
echo "pipeline rss test passed"
