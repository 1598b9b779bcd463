#!/usr/bin/env node
// The peer of bench_tokenizer.cpp: Hugging Face's tokenizers library (npm tokenizers@0.23.2,
// its Rust core) on the same text repeated to about MB megabytes: encode(whole text), encode per
// line, encodeBatch(lines) — run with RAYON_NUM_THREADS=1 for one thread. MB/s by the wall clock
// and by this process's CPU time (user + system: every thread the library starts).
//   NODE_PATH=.../node_modules [RAYON_NUM_THREADS=1] node bench_tokenizer_hf.js TOKENIZER.json TEXT [MB] [REPS]
'use strict';
const fs = require('fs');
const { Tokenizer } = require('tokenizers');

async function measure(what, bytes, reps, run) {
  let wall = 1e30, cpu = 1e30, ids = 0;
  for (let r = 0; r < reps; ++r) {
    const w0 = process.hrtime.bigint();
    const c0 = process.cpuUsage();
    ids = await run();
    const c = process.cpuUsage(c0);
    cpu = Math.min(cpu, (c.user + c.system) / 1e6);
    wall = Math.min(wall, Number(process.hrtime.bigint() - w0) / 1e9);
  }
  const mb = bytes / 1e6;
  console.log(`${what.padEnd(28)} ${mb.toFixed(2).padStart(8)} MB  ${String(ids).padStart(9)} ids  wall ${wall.toFixed(3)} s ` +
              `${(mb / wall).toFixed(2).padStart(7)} MB/s   cpu ${cpu.toFixed(3)} s ${(mb / cpu).toFixed(2).padStart(7)} MB/s  (best of ${reps})`);
}

(async () => {
  const [file, textPath, mbArg, repsArg] = process.argv.slice(2);
  const mb = Number(mbArg || 4), reps = Number(repsArg || 3);
  const one = fs.readFileSync(textPath, 'utf8');
  let text = '';
  while (Buffer.byteLength(text) < mb * 1e6) text += one;
  const bytes = Buffer.byteLength(text);
  const lines = text.split(/(?<=\n)/);
  const tok = Tokenizer.fromFile(file);
  console.log(`${file} on ${textPath} (${lines.length} lines), RAYON_NUM_THREADS=${process.env.RAYON_NUM_THREADS || '(all)'}`);
  await measure('encode(whole text)', bytes, reps, async () => (await tok.encode(text, null, { addSpecialTokens: false })).getIds().length);
  await measure('encode(each line)', bytes, reps, async () => {
    let n = 0;
    for (const l of lines) n += (await tok.encode(l, null, { addSpecialTokens: false })).getIds().length;
    return n;
  });
  await measure('encodeBatch(lines)', bytes, reps, async () => {
    let n = 0;
    for (const e of await tok.encodeBatch(lines, { addSpecialTokens: false })) n += e.getIds().length;
    return n;
  });
})().catch((e) => { console.error(e); process.exit(1); });
