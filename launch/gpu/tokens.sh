# Sourced by the GPU bench scripts: tokens FILE VOCAB COUNT writes COUNT random token ids below
# VOCAB in llm.c's .bin format (header 256 × i32: magic 20240520, version 1, count; then u16 ids),
# which `shardtrain train --data` reads too. Fixed seed: the same file every time.
tokens() {  # FILE VOCAB COUNT
  python3 - "$@" <<'PY'
import array, random, sys
path, vocab, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(1)
t = array.array("H", (rng.randrange(vocab) for _ in range(n)))
h = array.array("i", [0] * 256); h[0], h[1], h[2] = 20240520, 1, n
with open(path, "wb") as f: f.write(h.tobytes()); f.write(t.tobytes())
PY
}
