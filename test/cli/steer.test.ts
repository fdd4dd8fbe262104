import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { main } from '../../src/cli/main.js';
import { pathModel } from '../../src/formats/io/node-file.js';
import { modelChecksum } from '../../src/model/load.js';
import { readSteerFile } from '../../src/steer/format.js';
import { writeFixtureDir } from '../fixtures/write-dir.js';

/** Runs the CLI in-process, capturing what it writes. */
async function cli(args: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  vi.spyOn(process.stdout, 'write').mockImplementation((s) => {
    out += String(s);
    return true;
  });
  vi.spyOn(process.stderr, 'write').mockImplementation((s) => {
    err += String(s);
    return true;
  });
  try {
    return { code: await main(args), out, err };
  } finally {
    vi.restoreAllMocks();
  }
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('weft steer measure and weft generate --steer (CPU reference)', () => {
  it('measures a file, steers generation with it, and refuses it for another model', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'weft-steer-'));
    const a = join(dir, 'a');
    const b = join(dir, 'b');
    await writeFixtureDir(a, 'llama', 'f32', 7);
    await writeFixtureDir(b, 'llama', 'f32', 8);
    await writeFile(join(dir, 'pos.txt'), 'hello world\nthe cat sat\n');
    await writeFile(join(dir, 'neg.txt'), 'zzz qqq\n\nxy xy xy\n');
    const out = join(dir, 'dir.safetensors');
    const measured = await cli([
      'steer',
      'measure',
      '--model',
      a,
      '--positive',
      join(dir, 'pos.txt'),
      '--negative',
      join(dir, 'neg.txt'),
      '--layer',
      'all',
      '--out',
      out,
    ]);
    expect(measured.err).toBe('');
    expect(measured.code).toBe(0);
    expect(measured.out).toMatch(/2 layer\(s\), 2 positive and 2 negative prompts/);
    const file = await readSteerFile(await readFile(out), out);
    expect(file.modelChecksum).toBe(await modelChecksum(await pathModel(a)));
    expect([...file.layers.keys()]).toEqual([0, 1]);

    const gen = (model: string, steer: string[]) =>
      cli([
        'generate',
        '--model',
        model,
        '--prompt-ids',
        '5,17,99',
        '--max-tokens',
        '6',
        '--device',
        'cpu',
        '--json',
        ...steer,
      ]);
    const plain = await gen(a, []);
    const ablated = await gen(a, ['--steer', out, '--steer-mode', 'ablate']);
    const pushed = await gen(a, ['--steer', out, '--steer-mode', 'add', '--steer-scale', '40']);
    for (const r of [plain, ablated, pushed]) expect(r.code).toBe(0);
    const ids = (r: { out: string }) => (JSON.parse(r.out) as { ids: number[] }).ids;
    expect(ids(pushed)).toHaveLength(6);
    expect(ids(pushed)).not.toEqual(ids(plain));

    // --steer-layers picks among the file's layers; --steer-inputs also steers each block's input.
    const add = ['--steer', out, '--steer-mode', 'add', '--steer-scale', '40'];
    const layer1 = await gen(a, [...add, '--steer-layers', '1']);
    const everywhere = await gen(a, [...add, '--steer-layers', 'all', '--steer-inputs']);
    for (const r of [layer1, everywhere]) expect(r.code).toBe(0);
    expect(ids(layer1)).toHaveLength(6);
    expect(ids(layer1)).not.toEqual(ids(pushed));
    expect(ids(everywhere)).not.toEqual(ids(pushed));
    const noLayer = await gen(a, [...add, '--steer-layers', '2']);
    expect(noLayer.code).toBe(1);
    expect(noLayer.err).toMatch(/steer: layer 2 is not in \[0, 2\)/);
    const badLayers = await gen(a, [...add, '--steer-layers', 'first']);
    expect(badLayers.code).toBe(1);
    expect(badLayers.err).toMatch(/--steer-layers: "first" is not "all" or comma-separated layer indices/);
    const orphan = await gen(a, ['--steer-inputs', '--steer-layers', '0']);
    expect(orphan.code).toBe(1);
    expect(orphan.err).toMatch(/--steer-layers, --steer-inputs need --steer FILE/);

    const refused = await gen(b, ['--steer', out]);
    expect(refused.code).toBe(1);
    expect(refused.err).toMatch(
      /SteerMismatchError: .*dir\.safetensors: model_checksum = [0-9a-f]{64}, but the model has/,
    );
  }, 120_000);
});
