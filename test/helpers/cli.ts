import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

/**
 * Runs `node bin/weft.js ...args` (needs `npm run build`) and returns its exit code and output; `o`
 * may add to its environment and lengthen its time limit (default 240 s).
 */
export async function weft(
  args: string[],
  o: { timeout?: number; env?: Record<string, string> } = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run('node', ['bin/weft.js', ...args], {
      timeout: o.timeout ?? 240_000,
      env: { ...process.env, ...o.env },
    });
    return { code: 0, stdout, stderr };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string };
    return { code: err.code ?? -1, stdout: err.stdout ?? '', stderr: err.stderr ?? '' };
  }
}
