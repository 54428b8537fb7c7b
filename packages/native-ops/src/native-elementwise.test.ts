/**
 * FusedOps.addInto (the addon's vectorized target += term) against the
 * JavaScript loop it replaces (`t[i] += d[i]` on Float32Arrays, which rounds
 * each float64 sum of two floats to float32: the float32 sum), bit for bit,
 * on every instruction set this processor runs, at lengths around the
 * kernel's 4-vector and vector steps and on views into larger buffers; and
 * the argument checks of addInto and of adamwUpdate; and adamwUpdate on
 * every instruction set against a float64 loop written here (as
 * @ulysses/training's AdamW, whose tests compare the automatic choice with
 * its own loop), bit for bit, with and without a decay mask.
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

/** One AdamW update in float64, as @ulysses/training's AdamW.update computes it (each operation rounded as JavaScript does). */
function jsAdamw(p: Float32Array, g: Float32Array, m: Float32Array, v: Float32Array, mask: Uint8Array | null, h: readonly number[]): void {
  const [beta1, beta2, eps, lr, decay, c1, c2] = h as [number, number, number, number, number, number, number];
  const stepSize = lr / c1;
  const invSqrtC2 = 1 / Math.sqrt(c2);
  for (let i = 0; i < p.length; i++) {
    const gi = g[i]!;
    let pi = p[i]!;
    if (mask === null || mask[i] === 1) pi -= decay * pi;
    const mi = beta1 * m[i]! + (1 - beta1) * gi;
    const vi = beta2 * v[i]! + (1 - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - (stepSize * mi) / (Math.sqrt(vi) * invSqrtC2 + eps);
  }
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

  it.skipIf(!status.available)(
    "adamwUpdate: the bits of a float64 JavaScript loop on every instruction set, masked or not, every length around the vector steps",
    () => {
      const native = loadNative();
      if (!native.ok) throw native.error;
      const b = native.binding;
      const isas = [...opsPerIsa(cache).keys()];
      expect(isas).toContain("portable");
      for (const isa of isas) {
        for (const n of [1, 7, 8, 9, 63, 64, 65, 1000]) {
          for (const masked of [false, true]) {
            // signed zeros, huge and tiny values among ordinary ones; a mask of 0s and 1s
            const p = values(n, n + 11);
            const g = values(n, n + 12);
            const m = values(n, n + 13).map(Math.abs);
            const v = values(n, n + 14).map((x) => Math.min(Math.abs(x), 1e30));
            const mask = masked ? Uint8Array.from({ length: n }, (_, i) => ((i * 7) % 3 === 0 ? 0 : 1)) : null;
            const want = [p.slice(), g, m.slice(), v.slice()] as const;
            for (let step = 1; step <= 3; step++) {
              const h = [0.9, 0.95, 1e-8, 1e-3 * step, 1e-4 * step, 1 - 0.9 ** step, 1 - 0.95 ** step] as const;
              jsAdamw(want[0], want[1], want[2], want[3], mask, h);
              b.adamwUpdate(p, g, m, v, mask, ...h, isa);
              const where = `${isa}, n = ${n}, ${masked ? "masked" : "no mask"}, step ${step}`;
              expect(sameBits(p, want[0]), `params, ${where}`).toBe(true);
              expect(sameBits(m, want[2]), `m, ${where}`).toBe(true);
              expect(sameBits(v, want[3]), `v, ${where}`).toBe(true);
            }
          }
        }
      }
    },
  );

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
