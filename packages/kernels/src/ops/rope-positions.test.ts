/**
 * RoPE with every token's position (packed documents restart positions):
 * the reference against its offset form and against separate calls per
 * document, its backward against finite differences and as the inverse
 * rotation; OrtOps against the reference (maxRelativeError <= 1e-5); the
 * per-token table kept between calls never outlives a change of positions;
 * and the position checks name the offending entry.
 */
import { afterAll, describe, expect, it } from "vitest";
import { concat, narrow, type Tensor } from "@ulysses/tensors";
import { KernelError } from "../errors.js";
import { ReferenceOps } from "../reference/ops.js";
import { ropeRotate64 } from "../reference/rope.js";
import { dot, maxRelativeError, numericalGradient, randomTensor, randomTensor64, seededRandom } from "../reference/testing.js";
import { SessionCache } from "../runtime/session-cache.js";
import { OrtOps } from "./ort-ops.js";

const random = seededRandom(11);
const cache = new SessionCache({ intraOpThreads: 1 });
afterAll(() => cache.release());
const ort = new OrtOps(cache);
const ref = new ReferenceOps();

/** Positions of packed rows: every document of lengths[b] counts from 0. */
function restarting(lengths: number[][]): Int32Array {
  return Int32Array.from(lengths.flatMap((row) => row.flatMap((length) => [...Array(length).keys()])));
}

/** Row b of x [batch, seq, ...] as [1, seq, ...]. */
const row = (x: Tensor<"float32">, b: number) => narrow(x, 0, b, 1);

describe("rope with per-token positions", () => {
  it("reference: positions offset + t equal the offset form, exactly", () => {
    const x = randomTensor64([2, 5, 3, 8], random);
    for (const offset of [0, 7]) {
      const positions = Int32Array.from({ length: 10 }, (_, i) => offset + (i % 5));
      for (const sign of [1, -1] as const) {
        expect(Array.from(ropeRotate64(x, positions, 10000, sign).data)).toEqual(Array.from(ropeRotate64(x, offset, 10000, sign).data));
      }
    }
  });

  it("reference: restarted positions equal one call per document with offset 0; other positions differ", async () => {
    const lengths = [
      [3, 1, 5],
      [6, 3],
    ];
    const x = randomTensor([2, 9, 2, 6], random);
    const positions = restarting(lengths);
    for (const direction of ["ropeForward", "ropeBackward"] as const) {
      const packed = await ref[direction](x, positions);
      for (const [b, documents] of lengths.entries()) {
        let start = 0;
        const parts: Tensor<"float32">[] = [];
        for (const length of documents) {
          parts.push(await ref[direction](narrow(row(x, b), 1, start, length), 0));
          start += length;
        }
        expect(Array.from(row(packed, b).data), `${direction} row ${b}`).toEqual(Array.from(concat(parts, 1).data));
      }
      expect(maxRelativeError(packed, await ref[direction](x, 0))).toBeGreaterThan(0.1);
    }
  });

  it("reference: backward is the inverse rotation and the gradient of forward (finite differences)", () => {
    const x = randomTensor64([2, 4, 2, 6], random);
    const probe = randomTensor64([2, 4, 2, 6], random);
    const positions = Int32Array.from([0, 1, 0, 1, 9, 3, 0, 250]);
    const loss = () => dot(ropeRotate64(x, positions, 10000, 1), probe);
    expect(maxRelativeError(ropeRotate64(probe, positions, 10000, -1), numericalGradient(loss, x))).toBeLessThan(1e-6);
    expect(maxRelativeError(ropeRotate64(ropeRotate64(x, positions, 500, 1), positions, 500, -1), x)).toBeLessThan(1e-14);
  });

  for (const [dims, base] of [
    [[2, 9, 3, 8], 10000],
    [[1, 5, 2, 6], 500],
  ] as [[number, number, number, number], number][]) {
    it(`OrtOps matches the reference, forward and backward: ${dims.join("x")} base ${base}`, async () => {
      const x = randomTensor(dims, random);
      const dy = randomTensor(dims, random);
      const positions = Int32Array.from({ length: dims[0] * dims[1] }, () => Math.floor(random() * 3000));
      expect(maxRelativeError(await ort.ropeForward(x, positions, base), await ref.ropeForward(x, positions, base))).toBeLessThan(1e-5);
      expect(maxRelativeError(await ort.ropeBackward(dy, positions, base), await ref.ropeBackward(dy, positions, base))).toBeLessThan(1e-5);
      // Backward undoes forward.
      expect(maxRelativeError(await ort.ropeBackward(await ort.ropeForward(x, positions, base), positions, base), x)).toBeLessThan(1e-5);
    });
  }

  it("OrtOps: restarted positions equal separate calls, and a table is never reused for changed positions", async () => {
    const lengths = [[4, 5], [9]];
    const x = randomTensor([2, 9, 2, 8], random);
    const positions = restarting(lengths);
    const packed = await ort.ropeForward(x, positions);
    const first = await ort.ropeForward(narrow(row(x, 0), 1, 0, 4), 0);
    expect(maxRelativeError(narrow(row(packed, 0), 1, 0, 4), first)).toBeLessThan(1e-6);
    expect(maxRelativeError(row(packed, 1), await ort.ropeForward(row(x, 1), 0))).toBeLessThan(1e-6);
    // The same array, changed in place, and an equal copy: each call sees its own values.
    positions.fill(3);
    const moved = await ort.ropeForward(x, positions);
    expect(maxRelativeError(moved, await ref.ropeForward(x, positions))).toBeLessThan(1e-5);
    expect(maxRelativeError(moved, packed)).toBeGreaterThan(0.1);
    expect(maxRelativeError(await ort.ropeForward(x, restarting(lengths)), packed)).toBe(0);
    // Another shape with as many tokens reads its own table.
    const other = randomTensor([3, 6, 2, 8], random);
    expect(maxRelativeError(await ort.ropeForward(other, positions), await ref.ropeForward(other, positions))).toBeLessThan(1e-5);
  });

  it("checks positions: length, sign, type (naming the offending entry)", async () => {
    const x = randomTensor([2, 3, 1, 4], random);
    const cases: [unknown, RegExp][] = [
      [new Int32Array(5), /^ropeForward: positions must have batch \* seq = 2 \* 3 = 6 entries \(one per token\), got 5$/],
      [Int32Array.from([0, 1, 2, 0, -4, 1]), /^ropeForward: positions\[4\] \(row 1, token 1\) is -4; positions must be >= 0$/],
      [new Float32Array(6), /positions must be a non-negative integer offset or an Int32Array of batch \* seq positions, got a Float32Array/],
      [1.5, /positions must be a non-negative integer offset .*, got 1\.5/],
      [-1, /got -1/],
    ];
    for (const [positions, message] of cases) {
      for (const ops of [ort, ref]) {
        const call = ops.ropeForward(x, positions as Int32Array);
        await expect(call).rejects.toThrow(KernelError);
        await expect(ops.ropeForward(x, positions as Int32Array)).rejects.toThrow(message);
      }
    }
    await expect(ort.ropeBackward(x, new Int32Array(7))).rejects.toThrow(/^ropeBackward: positions must have batch \* seq = 2 \* 3 = 6 entries/);
  });
});
