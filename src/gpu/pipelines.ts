import { GpuStepError } from '../errors.js';
import { withErrorScope } from './scope.js';

/** What a kernel wrapper hands to the cache to build a pipeline the first time a key is seen. */
export interface PipelineCode {
  /** Full WGSL text, variants already rendered. */
  code: string;
  entryPoint?: string;
}

/**
 * Compute pipelines keyed by `kernel:variant`. Each is compiled once per device (with
 * `layout: 'auto'`); compile errors are reported with the kernel, variant and WGSL messages.
 */
export class PipelineCache {
  private readonly pipelines = new Map<string, GPUComputePipeline>();
  /** The last compile {@link prepare} queued (settled, never rejected). */
  private queue: Promise<unknown> = Promise.resolve();
  /** Number of pipelines compiled so far (tests assert steady-state decode compiles none). */
  compiled = 0;

  constructor(private readonly device: GPUDevice) {}

  /** Returns the cached pipeline for `kernel:variant`, compiling it from `code()` the first time. */
  get(kernel: string, variant: string, code: () => PipelineCode): GPUComputePipeline {
    const key = `${kernel}:${variant}`;
    const hit = this.pipelines.get(key);
    if (hit) return hit;
    const src = code();
    const module = this.device.createShaderModule({ label: key, code: src.code });
    const pipeline = this.device.createComputePipeline({
      label: key,
      layout: 'auto',
      compute: { module, entryPoint: src.entryPoint ?? 'main' },
    });
    this.pipelines.set(key, pipeline);
    this.compiled++;
    return pipeline;
  }

  /**
   * Like {@link get} but waits for the compiler and throws {@link GpuStepError} with the WGSL
   * diagnostics when the kernel does not compile. Use when a kernel is first prepared.
   */
  prepare(kernel: string, variant: string, code: () => PipelineCode): Promise<GPUComputePipeline> {
    const key = `${kernel}:${variant}`;
    const hit = this.pipelines.get(key);
    if (hit) return Promise.resolve(hit);
    // One compile at a time, in the order asked. A model's kernels are prepared together (one
    // Promise.all); compiled all at once, SwiftShader took 1.7x as long in all (demo target at f16
    // in Chromium: ready after 17.8 s, against 10.6 s one by one), and a GPU process compiles
    // the pipelines of one device one after another anyway.
    const run = this.queue.then(() => this.compile(key, code));
    this.queue = run.catch(() => undefined);
    return run;
  }

  private async compile(key: string, code: () => PipelineCode): Promise<GPUComputePipeline> {
    const hit = this.pipelines.get(key);
    if (hit) return hit;
    const src = code();
    const module = this.device.createShaderModule({ label: key, code: src.code });
    const info = await module.getCompilationInfo();
    const errors = info.messages.filter((m) => m.type === 'error');
    if (errors.length > 0) {
      const text = errors.map((m) => `${m.lineNum}:${m.linePos} ${m.message}`).join('; ');
      throw new GpuStepError(`compile ${key}`, text);
    }
    // createComputePipelineAsync crashes Dawn's Node binding (webgpu 0.6.2); the sync call inside an
    // error scope reports the same failures.
    const pipeline = await withErrorScope(this.device, `pipeline ${key}`, () =>
      this.device.createComputePipeline({
        label: key,
        layout: 'auto',
        compute: { module, entryPoint: src.entryPoint ?? 'main' },
      }),
    );
    this.pipelines.set(key, pipeline);
    this.compiled++;
    return pipeline;
  }

  get size(): number {
    return this.pipelines.size;
  }
}
