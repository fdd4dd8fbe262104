import type { ModelSpec } from '../model/spec.js';
import { ModelFormatError } from './errors.js';

/**
 * The tensors a checkpoint of `spec` must hold, by Hugging Face name, with their shapes (row-major,
 * `[out, in]` for Linear weights). The one place that knows the checkpoint layout of the families:
 * Qwen2 adds q/k/v biases, Qwen3 adds per-head q/k norms, untied models add `lm_head.weight`.
 */
export function expectedTensors(spec: ModelSpec): Map<string, readonly number[]> {
  const { hidden: h, intermediate: ff, headDim: hd, vocabSize: v } = spec;
  const q = spec.heads * hd; // [heads * head_dim]: width of q and of the attention output
  const kv = spec.kvHeads * hd; // [kv_heads * head_dim]: width of k and v
  const out = new Map<string, readonly number[]>();
  out.set('model.embed_tokens.weight', [v, h]);
  for (let i = 0; i < spec.layers; i++) {
    const p = `model.layers.${i}`;
    out.set(`${p}.input_layernorm.weight`, [h]);
    out.set(`${p}.self_attn.q_proj.weight`, [q, h]);
    out.set(`${p}.self_attn.k_proj.weight`, [kv, h]);
    out.set(`${p}.self_attn.v_proj.weight`, [kv, h]);
    if (spec.qkvBias) {
      out.set(`${p}.self_attn.q_proj.bias`, [q]);
      out.set(`${p}.self_attn.k_proj.bias`, [kv]);
      out.set(`${p}.self_attn.v_proj.bias`, [kv]);
    }
    if (spec.qkNorm) {
      out.set(`${p}.self_attn.q_norm.weight`, [hd]);
      out.set(`${p}.self_attn.k_norm.weight`, [hd]);
    }
    out.set(`${p}.self_attn.o_proj.weight`, [h, q]);
    out.set(`${p}.post_attention_layernorm.weight`, [h]);
    out.set(`${p}.mlp.gate_proj.weight`, [ff, h]);
    out.set(`${p}.mlp.up_proj.weight`, [ff, h]);
    out.set(`${p}.mlp.down_proj.weight`, [h, ff]);
  }
  out.set('model.norm.weight', [h]);
  if (!spec.tiedEmbeddings) out.set('lm_head.weight', [v, h]);
  return out;
}

/**
 * Checks that a checkpoint's tensors (name → shape) cover {@link expectedTensors} with the right
 * shapes. Extra tensors (e.g. a redundant `lm_head.weight` in a tied checkpoint, rotary caches)
 * are allowed. Throws {@link ModelFormatError} naming the file, the tensor and the problem.
 */
export function checkTensors(
  spec: ModelSpec,
  tensors: ReadonlyMap<string, { readonly shape: readonly number[] }>,
  file: string,
): void {
  for (const [name, shape] of expectedTensors(spec)) {
    const found = tensors.get(name);
    if (found === undefined) throw new ModelFormatError(file, name, undefined, 'missing tensor');
    if (found.shape.length !== shape.length || found.shape.some((d, i) => d !== shape[i])) {
      throw new ModelFormatError(file, name, found.shape, `wrong shape, expected [${shape.join(', ')}]`);
    }
  }
}
