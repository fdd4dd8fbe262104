// The error wire format in Node: every weft error class, turned into plain data the way the worker
// sends it, structured-cloned the way postMessage copies it, and built again the way the page does,
// comes back as the same class with the same name, message, fields, stack and cause.
import { describe, expect, it } from 'vitest';
import { fromWire, MAX_CAUSE_DEPTH, toWire } from '../../src/engine/worker-errors.js';
import { AbortError, WeftError } from '../../src/errors.js';
import * as weft from '../../src/index.js';
import { QuotaError } from '../../src/store/errors.js';
import { errorDifferences, sampleErrors } from '../fixtures/weft-errors.js';

/** Whether `v` is WeftError or one of its subclasses. */
const isErrorClass = (v: unknown): v is abstract new (...args: never[]) => WeftError =>
  typeof v === 'function' && (v === WeftError || v.prototype instanceof WeftError);

/** What the page sees of an error the worker threw. */
const across = (thrown: unknown): unknown => fromWire(structuredClone(toWire(thrown)));

describe('errors across a worker', () => {
  it('rebuild every weft error class with its name, message, fields, stack and cause', () => {
    for (const [name, err] of Object.entries(sampleErrors())) {
      expect(err.name).toBe(name);
      const got = across(err);
      expect(errorDifferences(err, got), name).toEqual([]);
      expect(got).toBeInstanceOf(err.constructor);
      expect(got).toBeInstanceOf(WeftError);
      expect(got instanceof Error && got.stack).toBe(err.stack);
    }
  });

  it('cover every error class weft exports', () => {
    const samples = Object.values(sampleErrors());
    const exported = Object.values(weft).flatMap((v) => (isErrorClass(v) ? [v] : []));
    expect(exported.length).toBe(samples.length);
    for (const cls of exported)
      expect(
        samples.some((e) => e.constructor === cls),
        cls.name,
      ).toBe(true);
  });

  it('keep a weft error cause as its class, with its own fields', () => {
    const err = sampleErrors().IntegrityError;
    const got = across(err);
    expect(got).toBeInstanceOf(weft.IntegrityError);
    const cause = got instanceof Error ? got.cause : undefined;
    expect(cause).toBeInstanceOf(weft.DownloadError);
    expect(cause).toMatchObject({ url: 'https://example.test/model.safetensors', status: 404 });
  });

  it('send other errors by name and message, and other values as data', () => {
    const dom = across(new DOMException('aborted by the page', 'AbortError'));
    // A DOMException named AbortError is not weft's AbortError.
    expect(dom).not.toBeInstanceOf(AbortError);
    expect(dom).toBeInstanceOf(Error);
    expect(dom).toMatchObject({ name: 'AbortError', message: 'aborted by the page' });
    expect(across('plain text')).toBe('plain text');
    expect(across(undefined)).toBeUndefined();
    expect(across({ code: 7, list: [1, 2] })).toEqual({ code: 7, list: [1, 2] });
    // A value structured clone cannot copy crosses as its String().
    expect(across({ f: () => 1 })).toBe('[object Object]');
    const withFunctionField = across(new weft.ModelFormatError('a.json', 'k', () => 1, 'bad'));
    expect(withFunctionField).toBeInstanceOf(weft.ModelFormatError);
    expect(withFunctionField).toMatchObject({ value: '() => 1' });
  });

  it(`cut a cause chain after ${MAX_CAUSE_DEPTH} causes, cycles included`, () => {
    let chain: Error = new Error('root');
    for (let i = 0; i < 20; i++) chain = new WeftError(`level ${i}`, { cause: chain });
    let depth = 0;
    for (let e: unknown = across(chain); e instanceof Error && 'cause' in e; e = e.cause) depth++;
    expect(depth).toBe(MAX_CAUSE_DEPTH);

    const cyclic = new Error('cycle');
    cyclic.cause = cyclic;
    const got = across(cyclic);
    expect(got).toMatchObject({ name: 'Error', message: 'cycle' });
  });

  it('rebuild a weft error whose fields do not fit its class as a plain Error of that name', () => {
    const wire = toWire(new QuotaError(10, 2, { cause: 'why' }));
    const got = fromWire(wire.kind === 'weft' ? { ...wire, fields: { needed: 'ten' } } : wire);
    expect(got).not.toBeInstanceOf(QuotaError);
    expect(got).toBeInstanceOf(Error);
    expect(got).toMatchObject({
      name: 'QuotaError',
      message: 'not enough storage for the model: 10 bytes needed, 2 available',
      cause: 'why',
    });
  });
});
