import { GpuStepError } from '../errors.js';

/**
 * Runs `fn` inside validation and out-of-memory error scopes and throws {@link GpuStepError} naming
 * `step` when either catches an error. Use it around object creation (pipelines, large buffers),
 * not around every dispatch: popping a scope waits for the GPU timeline.
 */
export async function withErrorScope<T>(device: GPUDevice, step: string, fn: () => T): Promise<T> {
  device.pushErrorScope('out-of-memory');
  device.pushErrorScope('validation');
  let result: T | undefined;
  let thrown: unknown;
  try {
    result = fn();
  } catch (e) {
    thrown = e;
  }
  const validation = await device.popErrorScope();
  const oom = await device.popErrorScope();
  const err = validation ?? oom;
  if (err) throw new GpuStepError(step, err.message, { cause: thrown });
  if (thrown !== undefined) throw thrown;
  return result as T;
}
