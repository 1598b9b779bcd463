# Sourced by the GPU bench scripts: tokens FILE VOCAB COUNT writes COUNT random token ids below
# VOCAB in llm.c's .bin format (header 256 × i32: magic 20240520, version, count; then the ids:
# version 1, u16, for VOCAB ≤ 65536; version 2, u32, above — docs/design.md "token files"), which
# `shardtrain train --data` reads. Fixed seed: the same file every time.
tokens() {  # FILE VOCAB COUNT
  python3 - "$@" <<'PY'
import array, random, sys
path, vocab, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(1)
wide = vocab > 65536
t = array.array("I" if wide else "H", (rng.randrange(vocab) for _ in range(n)))
assert t.itemsize == (4 if wide else 2) and sys.byteorder == "little"
h = array.array("i", [0] * 256); h[0], h[1], h[2] = 20240520, 2 if wide else 1, n
with open(path, "wb") as f: f.write(h.tobytes()); f.write(t.tobytes())
PY
}
