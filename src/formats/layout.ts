import { ModelFormatError } from './errors.js';
import { deriveSizes, type ModelSpec } from './spec.js';

/**
 * The Hugging Face name and shape of every tensor a spec needs, in checkpoint order. This is the one
 * place the names are written; every reader, `readWeights` and the test generators go through it.
 */
export function weightShapes(spec: ModelSpec): Map<string, readonly number[]> {
  const { qWidth, kvWidth } = deriveSizes(spec);
  const H = spec.hidden;
  const I = spec.intermediate;
  const shapes = new Map<string, readonly number[]>();
  shapes.set('model.embed_tokens.weight', [spec.vocabSize, H]);
  for (let i = 0; i < spec.layers; i++) {
    const p = `model.layers.${i}`;
    shapes.set(`${p}.input_layernorm.weight`, [H]);
    shapes.set(`${p}.self_attn.q_proj.weight`, [qWidth, H]);
    shapes.set(`${p}.self_attn.k_proj.weight`, [kvWidth, H]);
    shapes.set(`${p}.self_attn.v_proj.weight`, [kvWidth, H]);
    if (spec.qkvBias) {
      shapes.set(`${p}.self_attn.q_proj.bias`, [qWidth]);
      shapes.set(`${p}.self_attn.k_proj.bias`, [kvWidth]);
      shapes.set(`${p}.self_attn.v_proj.bias`, [kvWidth]);
    }
    if (spec.qkNorm) {
      shapes.set(`${p}.self_attn.q_norm.weight`, [spec.headDim]);
      shapes.set(`${p}.self_attn.k_norm.weight`, [spec.headDim]);
    }
    shapes.set(`${p}.self_attn.o_proj.weight`, [H, qWidth]);
    shapes.set(`${p}.post_attention_layernorm.weight`, [H]);
    shapes.set(`${p}.mlp.gate_proj.weight`, [I, H]);
    shapes.set(`${p}.mlp.up_proj.weight`, [I, H]);
    shapes.set(`${p}.mlp.down_proj.weight`, [H, I]);
  }
  shapes.set('model.norm.weight', [H]);
  if (!spec.tiedEmbeddings) shapes.set('lm_head.weight', [spec.vocabSize, H]);
  return shapes;
}

/**
 * Checks that a checkpoint's tensors (name → shape) cover {@link weightShapes} with the right
 * shapes. Extra tensors (e.g. a redundant `lm_head.weight` in a tied checkpoint, rotary caches)
 * are allowed. Throws {@link ModelFormatError} naming the tensor, the shapes and a file: `file`
 * (the checkpoint, or a sharded one's index) for a missing tensor, `fileOf(tensor)` (the shard
 * holding it; `file` by default) for a wrong shape.
 */
export function checkTensors(
  spec: ModelSpec,
  tensors: ReadonlyMap<string, { readonly shape: readonly number[] }>,
  file: string,
  fileOf: (tensor: string) => string = () => file,
): void {
  for (const [name, shape] of weightShapes(spec)) {
    const found = tensors.get(name);
    if (found === undefined) {
      throw new ModelFormatError(
        file,
        name,
        undefined,
        `missing tensor (expected shape [${shape.join(', ')}])`,
      );
    }
    if (found.shape.length !== shape.length || found.shape.some((d, i) => d !== shape[i])) {
      throw new ModelFormatError(
        fileOf(name),
        name,
        found.shape,
        `wrong shape, expected [${shape.join(', ')}]`,
      );
    }
  }
}
