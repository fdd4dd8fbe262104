#!/usr/bin/env node
// The `weft` command: runs the compiled CLI (npm run build writes dist/).
import { existsSync } from 'node:fs';

const entry = new URL('../dist/src/cli/main.js', import.meta.url);
if (!existsSync(entry)) {
  process.stderr.write('weft: the CLI is not built; run `npm run build` in the weft package\n');
  process.exit(1);
}
const { main } = await import(entry.href);
process.exitCode = await main(process.argv.slice(2));
