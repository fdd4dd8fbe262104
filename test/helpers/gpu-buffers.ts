/**
 * Runs `make` while recording every buffer created on `device`, then returns its result and those
 * buffers. Tests find a runner's buffers by label this way (its KV cache, its residual stream)
 * through the device alone, without test-only members on the runner.
 */
export async function withCreatedBuffers<T>(
  device: GPUDevice,
  make: () => Promise<T>,
): Promise<{ result: T; buffers: GPUBuffer[] }> {
  const buffers: GPUBuffer[] = [];
  const createBuffer = device.createBuffer;
  device.createBuffer = (d) => {
    const b = createBuffer.call(device, d);
    buffers.push(b);
    return b;
  };
  try {
    return { result: await make(), buffers };
  } finally {
    device.createBuffer = createBuffer;
  }
}

/** The one buffer labelled `label`; throws when there is none or more than one. */
export function bufferLabelled(buffers: readonly GPUBuffer[], label: string): GPUBuffer {
  const found = buffers.filter((b) => b.label === label);
  if (found.length !== 1) throw new Error(`${found.length} buffers labelled ${label}`);
  return found[0]!;
}
