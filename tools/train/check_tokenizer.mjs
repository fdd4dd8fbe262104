// Checks a trained tokenizer.json against @huggingface/tokenizers: same ids as the Python encoder,
// and decode(encode(text)) === text.
// Usage: node tools/train/check_tokenizer.mjs models/kjv-target cases.json
//   cases.json: {"texts": [...], "ids": [[...], ...]}  (ids from bpe.py, no BOS)
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';

const [dir, casesPath] = process.argv.slice(2);
const tokenizer = new Tokenizer(
  JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8')),
  JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8')),
);
const { texts, ids } = JSON.parse(readFileSync(casesPath, 'utf8'));

let idMismatches = 0;
let roundTripFailures = 0;
for (let i = 0; i < texts.length; i++) {
  const got = tokenizer.encode(texts[i], { add_special_tokens: false }).ids;
  if (got.length !== ids[i].length || got.some((id, j) => id !== ids[i][j])) {
    if (idMismatches < 5) console.log('ids differ:', JSON.stringify(texts[i]), got, ids[i]);
    idMismatches++;
  }
  const decoded = got.length ? tokenizer.decode(got) : '';
  if (decoded !== texts[i]) roundTripFailures++;
}
const withBos = tokenizer.encode('And God said', { add_special_tokens: true }).ids;
console.log(
  JSON.stringify({
    cases: texts.length,
    idMismatches,
    roundTripFailures,
    withBos,
    bos: tokenizer.decode([withBos[0]]),
  }),
);
process.exit(idMismatches || roundTripFailures ? 1 : 0);
