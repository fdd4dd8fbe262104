/** Scalar types allowed in a uniform block (all 4 bytes, so the layout is a plain array). */
export type UniformType = 'u32' | 'i32' | 'f32';

/** A uniform block layout: one declaration gives the WGSL struct and the byte packing. */
export interface UniformLayout<K extends string> {
  /** `struct NAME { a: u32, ... }` text to paste into the shader. */
  readonly wgsl: string;
  /** Size in bytes, padded to 16 as uniform buffers require. */
  readonly byteLength: number;
  /** Packs values in declaration order into a new ArrayBuffer of `byteLength` bytes. */
  pack(values: Record<K, number>): ArrayBuffer;
}

/** The field names of a uniform layout: `LayoutKeys<typeof Params>` types its values and slots. */
export type LayoutKeys<L> = L extends UniformLayout<infer K> ? K : never;

/**
 * Declares a uniform struct. Field order is the object's key order; every field is 4 bytes.
 *
 * @example const P = defineUniforms('Params', { M: 'u32', N: 'u32', eps: 'f32' });
 */
export function defineUniforms<K extends string>(
  name: string,
  fields: Record<K, UniformType>,
): UniformLayout<K> {
  const keys = Object.keys(fields) as K[];
  const byteLength = Math.max(16, Math.ceil((keys.length * 4) / 16) * 16);
  const wgsl = `struct ${name} {\n${keys.map((k) => `  ${k}: ${fields[k]},`).join('\n')}\n}`;
  return {
    wgsl,
    byteLength,
    pack(values) {
      const buf = new ArrayBuffer(byteLength);
      const dv = new DataView(buf);
      keys.forEach((k, i) => {
        const v = values[k];
        const t = fields[k];
        if (t === 'f32') dv.setFloat32(i * 4, v, true);
        else if (t === 'i32') dv.setInt32(i * 4, v, true);
        else dv.setUint32(i * 4, v, true);
      });
      return buf;
    },
  };
}
