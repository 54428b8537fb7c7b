/**
 * FusedOps.addInto (the addon's vectorized target += term) against the
 * JavaScript loop it replaces (`t[i] += d[i]` on Float32Arrays, which rounds
 * each float64 sum of two floats to float32: the float32 sum), bit for bit,
 * on every instruction set this processor runs, at lengths around the
 * kernel's 4-vector and vector steps and on views into larger buffers; and
 * the argument checks of addInto and of adamwUpdate (whose arithmetic
 * @ulysses/training's AdamW tests compare with its JavaScript loop).
 * Skipped, with the reason in the suite's name, when the addon is not built.
 */
import { SessionCache } from "@ulysses/kernels";
import { Tensor } from "@ulysses/tensors";
import { afterAll, describe, expect, it } from "vitest";
import { fusedAttentionStatus } from "./index.js";
import { loadNative } from "./native.js";
import { opsPerIsa } from "./testing-fixtures/isa-ops.js";

const status = fusedAttentionStatus();
const suite = status.available ? "FusedOps addInto and adamwUpdate (native)" : `FusedOps addInto and adamwUpdate (skipped: ${status.reason})`;

/** Values across float32's range (and signed zeros), from a fixed LCG: sums that round, cancel and overflow. */
function values(n: number, seed: number): Float32Array {
  let s = seed;
  const special = [0, -0, 3.4e38, -3.4e38, 1e-45, 1, -1];
  return Float32Array.from({ length: n }, (_, i) => {
    s = (s * 1103515245 + 12345) % 2147483648;
    const u = s / 2147483648 - 0.5;
    return i % 11 === 0 ? special[(i / 11) % special.length]! : u * 10 ** ((i % 13) - 6);
  });
}

function jsAdd(target: Float32Array, term: Float32Array): void {
  for (let i = 0; i < target.length; i++) target[i]! += term[i]!;
}

const sameBits = (a: Float32Array, b: Float32Array) =>
  Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));

describe(suite, () => {
  const cache = new SessionCache({ intraOpThreads: 1 });
  afterAll(() => cache.release());

  it.skipIf(!status.available)("addInto: the bits of the JavaScript loop, every instruction set, every length around the vector steps", () => {
    for (const [isa, ops] of opsPerIsa(cache)) {
      for (const n of [0, 1, 7, 8, 15, 16, 17, 63, 64, 65, 127, 128, 1000]) {
        const target = values(n, n + 1);
        const terms = [values(n, n + 2), values(n, n + 3)];
        const expected = target.slice();
        for (const t of terms) jsAdd(expected, t);
        const out = ops.addInto(new Tensor("float32", [n], target), ...terms.map((t) => new Tensor("float32", [n], t)));
        expect(out.data).toBe(target);
        expect(sameBits(target, expected), `${isa}, n = ${n}`).toBe(true);
      }
      // views at an odd offset into larger buffers, and a term that is the target itself
      const big = values(300, 9);
      const view = big.subarray(3, 203);
      const expected = view.slice();
      jsAdd(expected, expected.slice());
      ops.addInto(new Tensor("float32", [200], view), new Tensor("float32", [200], view));
      expect(sameBits(view, expected), `${isa}, target + target`).toBe(true);
      expect(big[2]).toBe(values(300, 9)[2]);
      expect(big[203]).toBe(values(300, 9)[203]);
    }
  });

  it.skipIf(!status.available)("addInto rejects a term of another size, and a term that partly overlaps the target", () => {
    const [, ops] = [...opsPerIsa(cache)][0]!;
    expect(() => ops.addInto(new Tensor("float32", [2, 3]), new Tensor("float32", [5]))).toThrow(/addInto: term \[5\] has 5 elements, target \[2, 3\] has 6/);
    const shared = new Float32Array(10);
    expect(() => ops.addInto(new Tensor("float32", [8], shared.subarray(0, 8)), new Tensor("float32", [8], shared.subarray(2, 10)))).toThrow(/partly overlaps/);
  });

  it.skipIf(!status.available)("adamwUpdate rejects arrays of other lengths, overlapping outputs and numbers that are not finite", () => {
    const native = loadNative();
    if (!native.ok) throw native.error;
    const b = native.binding;
    const a = () => new Float32Array(4);
    const rest = [0.9, 0.95, 1e-8, 1e-3, 1e-4, 0.1, 0.05] as const;
    expect(() => b.adamwUpdate(a(), new Float32Array(3), a(), a(), null, ...rest)).toThrow(/grads has 3 elements, params' length = 4/);
    const shared = a();
    expect(() => b.adamwUpdate(shared, a(), shared, a(), null, ...rest)).toThrow(/params overlaps m/);
    expect(() => b.adamwUpdate(a(), a(), a(), a(), new Uint8Array(3), ...rest)).toThrow(/decayMask has 3 elements/);
    expect(() => b.adamwUpdate(a(), a(), a(), a(), new Float32Array(4) as unknown as Uint8Array, ...rest)).toThrow(/decayMask must be a Uint8Array or null/);
    expect(() => b.adamwUpdate(a(), a(), a(), a(), null, 0.9, 0.95, 1e-8, Number.NaN, 1e-4, 0.1, 0.05)).toThrow(/lr must be a finite number/);
  });
});
