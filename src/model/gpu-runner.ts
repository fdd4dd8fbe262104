import { InvalidInputError } from '../errors.js';
import { deriveSizes, type ModelSpec } from '../formats/spec.js';
import type { TensorReader } from '../formats/weft-checkpoint.js';
import { createBuffer, readF32, STORAGE, uploadBuffer } from '../gpu/buffers.js';
import { createGpuContext, type GpuContext } from '../gpu/device.js';
import { Attention } from '../kernels/attention/attention.js';
import { BindGroupCache } from '../kernels/bind.js';
import { AddInPlace, GatherRows, SiluMul } from '../kernels/elementwise/elementwise.js';
import { Embedding } from '../kernels/embed/embed.js';
import { Hadamard } from '../kernels/hadamard/hadamard.js';
import { KvCompact, type KvFormat, type KvLayerBuffers, KvWrite, kvWordsPerSlot } from '../kernels/kv/kv.js';
import { type GpuMatrix, Matmul, prepareMatmul, uploadMatrix } from '../kernels/matmul/matmul.js';
import { RmsNorm } from '../kernels/norm/rmsnorm.js';
import { Rope } from '../kernels/rope/rope.js';
import { Sampler } from '../kernels/sample/sample.js';
import { Steer, type SteerPlan } from '../kernels/steer/steer.js';
import { MatmulW8A8, prepareW8A8, QuantizeAct } from '../kernels/w8a8/w8a8.js';
import {
  formatOf,
  isHadamardSize,
  isRotatedLinear,
  packedWidth,
  packLinear,
  type Quant,
  ROTATION_SEED,
  type Rotation,
} from '../quant/pack.js';
import type { OpenedModel } from './load.js';
import type { ForwardInput, ModelRunner, SamplerSpec } from './runner.js';
import { draftTree } from './tree.js';

/** Largest number of tokens one forward pass takes (prefill chunk or draft tree). */
export const MAX_FORWARD_TOKENS = 64;

/** Options of {@link createGpuRunner}. */
export interface GpuRunnerOptions {
  quant: Quant;
  /** KV cache slots. */
  capacity: number;
  gpu?: GpuContext;
  /** Destroy `gpu` with the runner (default: only when the runner created it). */
  ownsContext?: boolean;
  onProgress?: (e: { phase: 'weights'; done: number; total: number; tensor: string }) => void;
  /** Activation steering applied in every forward pass (see kernels/steer). */
  steer?: SteerPlan;
  /**
   * `'hadamard'`: rotate the input of every `*_proj` linear online (R·x on the GPU) and pack its
   * weights as W·Rᵀ (see `packLinear`), which spreads outliers before rounding. Default `'none'`.
   */
  rotate?: Rotation;
  /**
   * `'f16'`: the KV cache holds IEEE halves (rounded to nearest even), which halves its memory and
   * the bytes attention reads. Default `'f32'`.
   */
  kvFormat?: KvFormat;
}

/** y [M, N] = x [M, K] · Wᵀ for one resident weight matrix, whatever the arithmetic. */
interface Linear {
  encode(pass: GPUComputePassEncoder, x: GPUBuffer, y: GPUBuffer, M: number): void;
  destroy(): void;
}

/**
 * W8A8: each row of x is quantized to int8 with its own scale (per token, dynamic), then multiplied
 * with the int8 weights by `dot4I8Packed` with i32 sums. `xq`/`sx` are scratch shared by every
 * linear of the model: dispatches in one pass run in order, so each quantize-then-multiply pair
 * finishes with them before the next begins.
 */
class W8A8Linear implements Linear {
  private readonly quant: QuantizeAct;
  private readonly mm: MatmulW8A8;

  constructor(
    ctx: GpuContext,
    binds: BindGroupCache,
    w: GpuMatrix,
    private readonly xq: GPUBuffer,
    private readonly sx: GPUBuffer,
  ) {
    this.quant = new QuantizeAct(ctx, binds, w.cols);
    this.mm = new MatmulW8A8(ctx, binds, w, { maxM: MAX_FORWARD_TOKENS });
  }

  encode(pass: GPUComputePassEncoder, x: GPUBuffer, y: GPUBuffer, M: number): void {
    this.quant.encode(pass, x, this.xq, this.sx, M);
    this.mm.encode(pass, this.xq, this.sx, y, M);
  }

  destroy(): void {
    this.quant.destroy();
    this.mm.destroy();
  }
}

/** One decoder layer on the GPU. */
interface GpuLayer {
  inputNorm: GPUBuffer; // [H]
  postNorm: GPUBuffer; // [H]
  q: Linear; // [qWidth, H]
  k: Linear; // [kvWidth, H]
  v: Linear; // [kvWidth, H]
  o: Linear; // [H, qWidth]
  gate: Linear; // [I, H]
  up: Linear; // [I, H]
  down: Linear; // [H, I]
  // Biases repeated for MAX_FORWARD_TOKENS rows, so the plain in-place add applies them.
  qBias: GPUBuffer | undefined; // [MAX_FORWARD_TOKENS, qWidth]
  kBias: GPUBuffer | undefined; // [MAX_FORWARD_TOKENS, kvWidth]
  vBias: GPUBuffer | undefined; // [MAX_FORWARD_TOKENS, kvWidth]
  qNorm: GPUBuffer | undefined; // [headDim]
  kNorm: GPUBuffer | undefined; // [headDim]
  cache: KvLayerBuffers; // K and V: [capacity, kvHeads, headDim]
}

/** Resident weights. */
interface GpuWeights {
  embed: GpuMatrix; // [V, H], also the LM head when tied
  layers: GpuLayer[];
  norm: GPUBuffer; // [H]
  lmHead: Linear; // [V, H]
  matrices: GpuMatrix[]; // every matrix, for destroy
  scratch: GPUBuffer[]; // shared scratch (W8A8 activations)
  rot: Rotations | undefined; // the input rotations the `*_proj` weights were packed for
}

/**
 * Online input rotations (rotate 'hadamard'), one kernel per width, shared by every layer: the
 * `*_proj` weights are packed as W·Rᵀ, so their inputs must be R·x. Each rotation writes `out`,
 * which its linears read before the next rotation overwrites it (dispatches in a pass run in order).
 */
interface Rotations {
  hidden: Hadamard; // n = H: the normed input of q/k/v and of gate/up
  heads: Hadamard; // n = qWidth: the attention output, input of o_proj
  mlp: Hadamard; // n = Ip: silu(gate) * up, input of down_proj
  out: GPUBuffer; // [T, max(H, qWidth, Ip)] the rotated copy
}

/** One kernel instance per call site whose uniforms differ; shared where they never do. */
interface Kernels {
  embed: Embedding;
  norm: RmsNorm; // n = H, every T-row norm
  qNorm: RmsNorm | undefined; // n = headDim over T * heads rows
  kNorm: RmsNorm | undefined; // n = headDim over T * kvHeads rows
  rope: Rope;
  kvWrite: KvWrite;
  attention: Attention;
  compact: KvCompact;
  add: AddInPlace; // T * H
  addQ: AddInPlace; // T * qWidth
  addKv: AddInPlace; // T * kvWidth
  silu: SiluMul;
  gather: GatherRows;
  greedy: Sampler;
  gumbel: Sampler;
  // Activation steering, per layer: on the block's input and output (undefined: not steered).
  steerIn: (Steer | undefined)[];
  steerOut: (Steer | undefined)[];
}

function destroyWeights(w: GpuWeights): void {
  for (const m of w.matrices) m.destroy();
  w.norm.destroy();
  for (const l of w.layers) {
    for (const b of [
      l.inputNorm,
      l.postNorm,
      l.qBias,
      l.kBias,
      l.vBias,
      l.qNorm,
      l.kNorm,
      l.cache.k,
      l.cache.v,
    ])
      b?.destroy();
    for (const m of [l.q, l.k, l.v, l.o, l.gate, l.up, l.down]) m.destroy();
  }
  w.lmHead.destroy();
  for (const b of w.scratch) b.destroy();
  if (w.rot) for (const r of new Set([w.rot.hidden, w.rot.heads, w.rot.mlp])) r.destroy();
  w.rot?.out.destroy();
}

/** Activation buffers for up to MAX_FORWARD_TOKENS rows, allocated once. */
interface Activations {
  ids: GPUBuffer; // [T] u32 token ids
  positions: GPUBuffer; // [T] u32 RoPE positions
  slots: GPUBuffer; // [T] u32 cache slots
  ends: GPUBuffer; // [T] u32 last row of each node's subtree
  x: GPUBuffer; // [T, H] residual stream
  h: GPUBuffer; // [T, H] normed
  q: GPUBuffer; // [T, qWidth]
  k: GPUBuffer; // [T, kvWidth]
  v: GPUBuffer; // [T, kvWidth]
  qn: GPUBuffer; // [T, qWidth] q after QK-norm
  kn: GPUBuffer; // [T, kvWidth] k after QK-norm
  attn: GPUBuffer; // [T, qWidth]
  tmp: GPUBuffer; // [T, H]
  gate: GPUBuffer; // [T, I]
  up: GPUBuffer; // [T, I]
  act: GPUBuffer; // [T, I] silu(gate) * up
  rows: GPUBuffer; // [T] u32 rows to score
  hr: GPUBuffer; // [T, H] gathered rows
  logits: GPUBuffer; // [T, V]
  samplePositions: GPUBuffer; // [T] u32 position of each sampled token
  out: GPUBuffer; // [T] u32 sampled ids
  commitSlots: GPUBuffer; // [T] u32 source slots of an accepted path
  staging: GPUBuffer; // [T] u32, MAP_READ
}

/**
 * Runs a model on WebGPU: weights resident in the chosen format, one KV cache buffer pair per
 * layer, activation buffers for up to {@link MAX_FORWARD_TOKENS} tokens, and a kernel instance per
 * call site, all made once. A forward pass is one compute pass and one 4-byte-per-row readback of
 * the sampled ids: logits never leave the GPU, and nothing is created per token.
 */
export class GpuRunner implements ModelRunner {
  private committed = 0;
  private lastTokens = 0;
  private lastBase = 0;
  private lastRows = 0;
  /** MAP_READ copy of the logits buffer for {@link GpuRunner.lastLogits}, made on first use. */
  private logitsStaging: GPUBuffer | undefined;
  private readonly sizes;

  constructor(
    readonly spec: ModelSpec,
    readonly capacity: number,
    private readonly ctx: GpuContext,
    private readonly ownsContext: boolean,
    private readonly k: Kernels,
    private readonly w: GpuWeights,
    private readonly a: Activations,
  ) {
    this.sizes = deriveSizes(spec);
  }

  get kvLength(): number {
    return this.committed;
  }

  /** Bytes the KV cache holds on the device, every layer's keys and values. */
  get kvCacheBytes(): number {
    return this.w.layers.reduce((sum, l) => sum + l.cache.k.size + l.cache.v.size, 0);
  }

  async forward(input: ForwardInput, sampler: SamplerSpec, rows: 'last' | 'all'): Promise<Int32Array> {
    this.ctx.assertAlive();
    const T = input.tokens.length;
    const { spec, a, k, w } = this;
    const { qWidth, kvWidth } = this.sizes;
    const H = spec.hidden;
    if (T < 1 || T > MAX_FORWARD_TOKENS)
      throw new InvalidInputError(`forward: ${T} tokens, must be 1..${MAX_FORWARD_TOKENS}`);
    const base = this.committed;
    if (base + T > this.capacity)
      throw new InvalidInputError(
        `forward: ${base} cached + ${T} new tokens exceed the KV cache of ${this.capacity}`,
      );
    for (const t of input.tokens)
      if (!Number.isInteger(t) || t < 0 || t >= spec.vocabSize)
        throw new InvalidInputError(`forward: token id ${t} is outside the vocabulary of ${spec.vocabSize}`);
    const tree = draftTree(input.parents ?? input.tokens.map((_, i) => i - 1));
    const picked = rows === 'last' ? [T - 1] : input.tokens.map((_, i) => i);
    const R = picked.length;
    const q = this.ctx.device.queue;
    q.writeBuffer(a.ids, 0, Uint32Array.from(input.tokens));
    q.writeBuffer(
      a.positions,
      0,
      Uint32Array.from(tree.depth, (d) => base + d),
    );
    q.writeBuffer(
      a.slots,
      0,
      Uint32Array.from(tree.depth, (_, i) => base + i),
    );
    q.writeBuffer(a.ends, 0, Uint32Array.from(tree.end));
    q.writeBuffer(a.rows, 0, Uint32Array.from(picked));
    // The token after node i stands at position base + depth(i) + 1: the Gumbel key's position.
    q.writeBuffer(
      a.samplePositions,
      0,
      Uint32Array.from(picked, (i) => base + tree.depth[i]! + 1),
    );

    const enc = this.ctx.device.createCommandEncoder({ label: 'forward' });
    const pass = enc.beginComputePass({ label: 'forward' });
    // A linear's input as its weights expect it: R·x in the rotation's buffer, or x itself.
    const rotated = (r: Hadamard | undefined, x: GPUBuffer): GPUBuffer => {
      if (!r || !w.rot) return x;
      r.encode(pass, x, w.rot.out, T);
      return w.rot.out;
    };
    k.embed.encode(pass, a.ids, a.x, T);
    for (const [i, l] of w.layers.entries()) {
      k.steerIn[i]?.encode(pass, a.x, T); // steering: the block's input (SteerPlan.inputs)
      k.norm.encode(pass, a.x, l.inputNorm, a.h, T);
      const hq = rotated(w.rot?.hidden, a.h); // one rotated copy for q, k and v
      l.q.encode(pass, hq, a.q, T);
      l.k.encode(pass, hq, a.k, T);
      l.v.encode(pass, hq, a.v, T);
      if (l.qBias && l.kBias && l.vBias) {
        k.addQ.encode(pass, l.qBias, a.q, T * qWidth);
        k.addKv.encode(pass, l.kBias, a.k, T * kvWidth);
        k.addKv.encode(pass, l.vBias, a.v, T * kvWidth);
      }
      let qIn = a.q;
      let kIn = a.k;
      if (k.qNorm && k.kNorm && l.qNorm && l.kNorm) {
        k.qNorm.encode(pass, a.q, l.qNorm, a.qn, T * spec.heads);
        k.kNorm.encode(pass, a.k, l.kNorm, a.kn, T * spec.kvHeads);
        qIn = a.qn;
        kIn = a.kn;
      }
      k.rope.encode(pass, qIn, kIn, a.positions, T);
      k.kvWrite.encode(pass, kIn, a.v, a.slots, l.cache, T);
      k.attention.encode(pass, qIn, l.cache.k, l.cache.v, a.ends, a.attn, T, base);
      l.o.encode(pass, rotated(w.rot?.heads, a.attn), a.tmp, T);
      k.add.encode(pass, a.tmp, a.x, T * H); // x += tmp
      k.norm.encode(pass, a.x, l.postNorm, a.h, T);
      const hm = rotated(w.rot?.hidden, a.h); // one rotated copy for gate and up
      l.gate.encode(pass, hm, a.gate, T);
      l.up.encode(pass, hm, a.up, T);
      k.silu.encode(pass, [a.gate, a.up], a.act, T);
      l.down.encode(pass, rotated(w.rot?.mlp, a.act), a.tmp, T);
      k.add.encode(pass, a.tmp, a.x, T * H); // x += tmp
      k.steerOut[i]?.encode(pass, a.x, T); // steering: the block's output
    }
    k.norm.encode(pass, a.x, w.norm, a.h, T);
    let head = a.h;
    if (R < T) {
      k.gather.encode(pass, a.h, a.rows, a.hr, R);
      head = a.hr;
    }
    w.lmHead.encode(pass, head, a.logits, R);
    const s = sampler.temperature > 0 ? k.gumbel : k.greedy;
    s.encode(pass, a.logits, a.samplePositions, a.out, R, {
      seed: sampler.seed,
      temperature: sampler.temperature,
      topK: sampler.topK,
      topP: sampler.topP,
    });
    pass.end();
    enc.copyBufferToBuffer(a.out, 0, a.staging, 0, R * 4);
    q.submit([enc.finish()]);
    await Promise.race([
      a.staging.mapAsync(GPUMapMode.READ, 0, R * 4),
      this.ctx.lost.then((e) => Promise.reject(e)),
    ]);
    const ids = Int32Array.from(new Uint32Array(a.staging.getMappedRange(0, R * 4)));
    a.staging.unmap();
    this.lastTokens = T;
    this.lastBase = base;
    this.lastRows = R;
    return ids;
  }

  /**
   * Logits [R, V] of the rows the last forward scored (or of `rows` only, in that order), copied to
   * the CPU. Plain and Gumbel decoding never read logits back; the rejection rule and best-first
   * tree drafting do (see {@link ModelRunner.lastLogits}). The staging buffer is made on first use
   * and kept, so a speculative loop creates nothing per pass.
   */
  async lastLogits(rows?: readonly number[]): Promise<Float32Array> {
    this.ctx.assertAlive();
    const rowBytes = this.spec.vocabSize * 4;
    for (const r of rows ?? [])
      if (!Number.isInteger(r) || r < 0 || r >= this.lastRows)
        throw new InvalidInputError(`lastLogits: row ${r} is not one of the ${this.lastRows} scored rows`);
    if (rows && rows.length > this.lastRows)
      throw new InvalidInputError(`lastLogits: ${rows.length} rows asked for, ${this.lastRows} scored`);
    const bytes = (rows?.length ?? this.lastRows) * rowBytes;
    if (bytes === 0) return new Float32Array(0);
    this.logitsStaging ??= this.ctx.device.createBuffer({
      label: 'logits-readback',
      size: this.a.logits.size,
      usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    });
    const staging = this.logitsStaging;
    const enc = this.ctx.device.createCommandEncoder({ label: 'logits-readback' });
    if (!rows) enc.copyBufferToBuffer(this.a.logits, 0, staging, 0, bytes);
    for (const [i, r] of (rows ?? []).entries())
      enc.copyBufferToBuffer(this.a.logits, r * rowBytes, staging, i * rowBytes, rowBytes);
    this.ctx.device.queue.submit([enc.finish()]);
    await Promise.race([
      staging.mapAsync(GPUMapMode.READ, 0, bytes),
      this.ctx.lost.then((e) => Promise.reject(e)),
    ]);
    const out = new Float32Array(staging.getMappedRange(0, bytes).slice(0));
    staging.unmap();
    return out;
  }

  /**
   * The residual stream [T, H] after the last block of the last forward (before the final norm),
   * copied to the CPU. For tests only (checking steering at the last layer).
   */
  async lastResidual(): Promise<Float32Array> {
    return readF32(this.ctx, this.a.x, this.lastTokens * this.spec.hidden);
  }

  commit(path: readonly number[]): void {
    if (this.lastBase !== this.committed)
      throw new InvalidInputError('commit: the cache changed since the last forward');
    for (const i of path)
      if (!Number.isInteger(i) || i < 0 || i >= this.lastTokens)
        throw new InvalidInputError(
          `commit: node ${i} is not in the last forward (${this.lastTokens} tokens)`,
        );
    // Rows already in place (a chain's prefix) need no copy.
    if (path.some((node, i) => node !== i)) {
      const slots = Uint32Array.from(path, (i) => this.committed + i);
      this.ctx.device.queue.writeBuffer(this.a.commitSlots, 0, slots);
      const enc = this.ctx.device.createCommandEncoder({ label: 'commit' });
      const pass = enc.beginComputePass({ label: 'commit' });
      this.k.compact.encode(
        pass,
        this.w.layers.map((l) => l.cache),
        this.a.commitSlots,
        path.length,
        this.committed,
      );
      pass.end();
      this.ctx.device.queue.submit([enc.finish()]);
    }
    this.committed += path.length;
    this.lastTokens = 0;
  }

  trim(length: number): void {
    if (!Number.isInteger(length) || length < 0)
      throw new InvalidInputError(`trim: length ${length} must be >= 0`);
    this.committed = Math.min(this.committed, length);
    this.lastTokens = 0;
  }

  dispose(): void {
    for (const b of Object.values(this.a)) b.destroy();
    this.logitsStaging?.destroy();
    destroyWeights(this.w);
    if (this.ownsContext) this.ctx.destroy();
  }
}

/** Checks that a tensor exists with `shape` (its Hugging Face shape, whatever the file format). */
function checkTensor(weights: TensorReader, name: string, shape: readonly number[]): void {
  const info = weights.tensors.get(name);
  if (!info) throw new InvalidInputError(`model weights: missing tensor ${name}`);
  if (info.shape.length !== shape.length || info.shape.some((d, i) => d !== shape[i]))
    throw new InvalidInputError(`model weights: ${name} has shape [${info.shape}], expected [${shape}]`);
}

/** Reads a tensor as f32, checking its shape. */
async function tensor(weights: TensorReader, name: string, shape: readonly number[]): Promise<Float32Array> {
  checkTensor(weights, name, shape);
  return weights.readF32(name);
}

/** Repeats a bias vector for every row a forward pass can hold. */
function repeatRows(v: Float32Array, rows: number): Float32Array {
  const out = new Float32Array(v.length * rows);
  for (let r = 0; r < rows; r++) out.set(v, r * v.length);
  return out;
}

/**
 * Places an opened model on the GPU in the chosen format, tensor by tensor (each is read, packed,
 * uploaded and dropped before the next), and returns its runner.
 */
export async function createGpuRunner(opened: OpenedModel, o: GpuRunnerOptions): Promise<GpuRunner> {
  const { spec, weights } = opened;
  const ctx = o.gpu ?? (await createGpuContext());
  const binds = new BindGroupCache(ctx.device);
  const format = formatOf(o.quant);
  const { qWidth, kvWidth } = deriveSizes(spec);
  const H = spec.hidden;
  const I = spec.intermediate;
  const rotate = o.rotate ?? 'none';
  // The matmul reads K in blocks of 16, and a rotation needs a Hadamard size. An MLP width that is
  // neither (the demo draft's 344) is padded with zero rows of gate/up and zero columns of down:
  // silu(0) * 0 = 0, so exact. The residual and attention widths must already be both.
  const Ip = packedWidth(I, rotate);
  if (rotate === 'hadamard')
    for (const [field, n] of [
      ['hidden_size', H],
      ['q width (num_attention_heads * head_dim)', qWidth],
    ] as const)
      if (n % 16 !== 0 || !isHadamardSize(n))
        throw new InvalidInputError(
          `rotate hadamard: ${field} = ${n} is not a Hadamard size K·2^m that is a multiple of 16`,
        );
  const V = spec.vocabSize;
  const D = spec.headDim;
  const maxT = MAX_FORWARD_TOKENS;
  const capacity = o.capacity;
  const kvFormat = o.kvFormat ?? 'f32';
  // Checked before any weight is read: an f16 cache needs an even headDim.
  const kvShape = { capacity, kvHeads: spec.kvHeads, headDim: D, format: kvFormat };
  kvWordsPerSlot(kvShape);
  const names = [...weights.tensors.keys()];
  let done = 0;
  const step = (name: string) =>
    o.onProgress?.({ phase: 'weights', done: ++done, total: names.length, tensor: name });
  const matrices: GpuMatrix[] = [];
  // `pad` grows the matrix with zero rows and columns to [padRows, padCols] (see Ip above).
  const matrix = async (
    name: string,
    rows: number,
    cols: number,
    pad: { rows: number; cols: number } = { rows, cols },
  ): Promise<GpuMatrix> => {
    const r = isRotatedLinear(name) ? rotate : 'none';
    checkTensor(weights, name, [rows, cols]);
    // A weft-q checkpoint packed exactly this way is copied; anything else is packed here from f32
    // (for weft-q: its dequantized values, so a different --quant re-quantizes).
    const stored = await weights.readPacked?.(name, { format, rows: pad.rows, cols: pad.cols, rotation: r });
    const packed = stored ?? packLinear(await weights.readF32(name), rows, cols, pad, format, r);
    const m = uploadMatrix(ctx, packed, name);
    matrices.push(m);
    step(name);
    return m;
  };
  // W8A8 scratch: int8 activations [maxT, maxK] packed 4 per u32, and one scale per row.
  const maxK = Math.max(H, Ip, qWidth);
  const xq = o.quant === 'w8a8' ? createBuffer(ctx, maxT * maxK, 'w8a8-xq') : undefined;
  const sx = o.quant === 'w8a8' ? createBuffer(ctx, maxT * 4, 'w8a8-sx') : undefined;
  const linearOf = (m: GpuMatrix): Linear =>
    xq && sx ? new W8A8Linear(ctx, binds, m, xq, sx) : new Matmul(ctx, binds, m, { maxM: maxT });
  const linear = async (name: string, rows: number, cols: number, pad?: { rows: number; cols: number }) =>
    linearOf(await matrix(name, rows, cols, pad));
  const vector = async (name: string, n: number, repeat = 1) => {
    const v = await tensor(weights, name, [n]);
    step(name);
    return uploadBuffer(ctx, repeat > 1 ? repeatRows(v, repeat) : v, name);
  };

  const embed = await matrix('model.embed_tokens.weight', V, H);
  const layers: GpuLayer[] = [];
  for (let i = 0; i < spec.layers; i++) {
    const p = `model.layers.${i}`;
    const cacheBytes = capacity * kvWordsPerSlot(kvShape) * 4;
    layers.push({
      inputNorm: await vector(`${p}.input_layernorm.weight`, H),
      postNorm: await vector(`${p}.post_attention_layernorm.weight`, H),
      q: await linear(`${p}.self_attn.q_proj.weight`, qWidth, H),
      k: await linear(`${p}.self_attn.k_proj.weight`, kvWidth, H),
      v: await linear(`${p}.self_attn.v_proj.weight`, kvWidth, H),
      o: await linear(`${p}.self_attn.o_proj.weight`, H, qWidth),
      gate: await linear(`${p}.mlp.gate_proj.weight`, I, H, { rows: Ip, cols: H }),
      up: await linear(`${p}.mlp.up_proj.weight`, I, H, { rows: Ip, cols: H }),
      down: await linear(`${p}.mlp.down_proj.weight`, H, I, { rows: H, cols: Ip }),
      qBias: spec.qkvBias ? await vector(`${p}.self_attn.q_proj.bias`, qWidth, maxT) : undefined,
      kBias: spec.qkvBias ? await vector(`${p}.self_attn.k_proj.bias`, kvWidth, maxT) : undefined,
      vBias: spec.qkvBias ? await vector(`${p}.self_attn.v_proj.bias`, kvWidth, maxT) : undefined,
      qNorm: spec.qkNorm ? await vector(`${p}.self_attn.q_norm.weight`, D) : undefined,
      kNorm: spec.qkNorm ? await vector(`${p}.self_attn.k_norm.weight`, D) : undefined,
      cache: {
        k: createBuffer(ctx, cacheBytes, `${p}.k_cache`),
        v: createBuffer(ctx, cacheBytes, `${p}.v_cache`),
      },
    });
  }
  const norm = await vector('model.norm.weight', H);
  const lmHead = new Matmul(ctx, binds, spec.tiedEmbeddings ? embed : await matrix('lm_head.weight', V, H), {
    maxM: maxT,
  });

  const eps = spec.rmsEps;
  await Promise.all([
    RmsNorm.prepare(ctx),
    Embedding.prepare(ctx, format),
    Rope.prepare(ctx, spec.rope.layout),
    AddInPlace.prepare(ctx),
    SiluMul.prepare(ctx, false),
    GatherRows.prepare(ctx),
    prepareMatmul(ctx, format, maxT),
    ...(o.quant === 'w8a8' ? [prepareW8A8(ctx, format, maxT)] : []),
    KvWrite.prepare(ctx, kvFormat),
    KvCompact.prepare(ctx),
    Attention.prepare(ctx, kvFormat),
    Sampler.prepare(ctx, true),
    Sampler.prepare(ctx, false),
    ...(o.steer ? [Steer.prepare(ctx)] : []),
  ]);
  // Steering vectors: one [layers, H] buffer, layer l's vector at l * H (zeros where unused).
  const plan = o.steer;
  const steerVectors = plan && new Float32Array(spec.layers * H);
  plan?.vectors.forEach((r, l) => {
    if (r) steerVectors?.set(r, l * H);
  });
  const steerBuf = steerVectors && uploadBuffer(ctx, steerVectors, 'steer-vectors');
  const steerAt = (l: number, on: boolean) =>
    plan && steerBuf && plan.vectors[l] && on
      ? new Steer(ctx, binds, steerBuf, { hidden: H, offset: l * H, mode: plan.mode, scale: plan.scale })
      : undefined;
  const kernels: Kernels = {
    embed: new Embedding(ctx, binds, embed),
    norm: new RmsNorm(ctx, binds, { n: H, eps }),
    qNorm: spec.qkNorm ? new RmsNorm(ctx, binds, { n: D, eps }) : undefined,
    kNorm: spec.qkNorm ? new RmsNorm(ctx, binds, { n: D, eps }) : undefined,
    rope: new Rope(ctx, binds, {
      heads: spec.heads,
      kvHeads: spec.kvHeads,
      headDim: D,
      theta: spec.rope.theta,
      layout: spec.rope.layout,
      ...(spec.rope.scaling ? { scaling: spec.rope.scaling } : {}),
    }),
    kvWrite: new KvWrite(ctx, binds, kvShape),
    attention: new Attention(ctx, binds, {
      heads: spec.heads,
      kvHeads: spec.kvHeads,
      headDim: D,
      capacity,
      format: kvFormat,
    }),
    compact: new KvCompact(ctx, binds, kvShape),
    add: new AddInPlace(ctx, binds),
    addQ: new AddInPlace(ctx, binds),
    addKv: new AddInPlace(ctx, binds),
    silu: new SiluMul(ctx, binds, Ip, false),
    gather: new GatherRows(ctx, binds, H),
    greedy: new Sampler(ctx, binds, { vocab: V, greedy: true }),
    gumbel: new Sampler(ctx, binds, { vocab: V, greedy: false }),
    steerIn: layers.map((_, l) => steerAt(l, plan?.inputs ?? false)),
    steerOut: layers.map((_, l) => steerAt(l, true)),
  };
  const f = (n: number, label: string) => createBuffer(ctx, maxT * n * 4, label, STORAGE);
  const acts: Activations = {
    ids: f(1, 'ids'),
    positions: f(1, 'positions'),
    slots: f(1, 'slots'),
    ends: f(1, 'ends'),
    x: f(H, 'x'),
    h: f(H, 'h'),
    q: f(qWidth, 'q'),
    k: f(kvWidth, 'k'),
    v: f(kvWidth, 'v'),
    qn: f(qWidth, 'qn'),
    kn: f(kvWidth, 'kn'),
    attn: f(qWidth, 'attn'),
    tmp: f(H, 'tmp'),
    gate: f(Ip, 'gate'),
    up: f(Ip, 'up'),
    act: f(Ip, 'act'),
    rows: f(1, 'rows'),
    hr: f(H, 'hr'),
    logits: f(V, 'logits'),
    samplePositions: f(1, 'sample-positions'),
    out: f(1, 'sampled'),
    commitSlots: f(1, 'commit-slots'),
    staging: ctx.device.createBuffer({
      label: 'sampled-readback',
      size: maxT * 4,
      usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    }),
  };
  // One Hadamard kernel per width (a single instance where widths agree: same uniforms).
  const rotations = (): Rotations => {
    const byWidth = new Map<number, Hadamard>();
    const at = (n: number): Hadamard => {
      const h = byWidth.get(n) ?? new Hadamard(ctx, binds, n, ROTATION_SEED, { maxM: maxT });
      byWidth.set(n, h);
      return h;
    };
    const out = createBuffer(ctx, maxT * Math.max(H, qWidth, Ip) * 4, 'rotated-input');
    return { hidden: at(H), heads: at(qWidth), mlp: at(Ip), out };
  };
  const w: GpuWeights = {
    embed,
    layers,
    norm,
    lmHead,
    matrices,
    scratch: [xq, sx, steerBuf].filter((b) => b !== undefined),
    rot: rotate === 'hadamard' ? rotations() : undefined,
  };
  return new GpuRunner(spec, capacity, ctx, o.ownsContext ?? !o.gpu, kernels, w, acts);
}
