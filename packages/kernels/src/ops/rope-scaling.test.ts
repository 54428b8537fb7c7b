/**
 * RoPE scaling: ropeInverseFrequencies against the formulas written out here
 * (linear: base^(-2i/d) / factor; llama3 in its clamped form,
 * s = clamp((L inv / (2 pi) - low) / (high - low), 0, 1),
 * inv' = inv (s + (1 - s) / factor)), with all three llama3 bands present;
 * yarn as the YaRN paper's code computes it (correction dimensions
 * d ln(L / (2 pi r)) / (2 ln base) for beta_fast and beta_slow, floored and
 * ceiled or not, a linear ramp between them over the pair index), its values
 * at Qwen3's settings, and its attention factor on cos and sin; OrtOps' rope
 * forward and backward with a scaling against the float64 reference (offset
 * and per-token positions, maxRelativeError <= 1e-5), its table caches keyed
 * by the scaling, and the scaling's checks.
 */
import { afterAll, describe, expect, it } from "vitest";
import { KernelError } from "../errors.js";
import { ReferenceOps } from "../reference/ops.js";
import { ropeRotate64 } from "../reference/rope.js";
import { maxRelativeError, randomTensor, seededRandom } from "../reference/testing.js";
import { SessionCache } from "../runtime/session-cache.js";
import { OrtOps } from "./ort-ops.js";
import { ropeAttentionFactor, ropeInverseFrequencies, ropeScalingKey, ropeScalingProblem, type RopeScaling } from "./rope-scaling.js";

const random = seededRandom(23);
const cache = new SessionCache({ intraOpThreads: 1 });
afterAll(() => cache.release());
const ort = new OrtOps(cache);
const ref = new ReferenceOps();

/** Llama 3.1's values with a small context: at d = 16, base 10000 the wavelengths run from 6.3 to 20,000. */
const llama3: RopeScaling = { type: "llama3", factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositions: 512 };
const linear: RopeScaling = { type: "linear", factor: 3 };
/** At d = 16, base 10000 and L = 512: beta_fast's dimension 0.81 (floored: 0), beta_slow's 3.82 (ceiled: 4): pair 0 kept, 1 to 3 ramped, 4 to 7 interpolated. */
const yarn: RopeScaling = { type: "yarn", factor: 4, originalMaxPositions: 512, betaFast: 32, betaSlow: 1, attentionFactor: 1.25, truncate: true };

/** The expected inv_freq, written from the formulas above. */
function expected(d: number, base: number, scaling?: RopeScaling): number[] {
  return Array.from({ length: d / 2 }, (_, i) => {
    const inv = 1 / base ** ((2 * i) / d);
    if (scaling === undefined) return inv;
    if (scaling.type === "linear") return inv / scaling.factor;
    if (scaling.type === "yarn") {
      const dimension = (r: number) => (d * Math.log(scaling.originalMaxPositions / (2 * Math.PI * r))) / (2 * Math.log(base));
      const round = scaling.truncate ? [Math.floor, Math.ceil] : [(x: number) => x, (x: number) => x];
      const low = Math.max(0, round[0]!(dimension(scaling.betaFast)));
      const high = Math.min(d - 1, round[1]!(dimension(scaling.betaSlow)));
      const ramp = Math.min(1, Math.max(0, (i - low) / (high - low)));
      return (1 - ramp) * inv + (ramp * inv) / scaling.factor;
    }
    const raw = ((scaling.originalMaxPositions * inv) / (2 * Math.PI) - scaling.lowFreqFactor) / (scaling.highFreqFactor - scaling.lowFreqFactor);
    const s = Math.min(1, Math.max(0, raw));
    return inv * (s + (1 - s) / scaling.factor);
  });
}

function closeTo(got: ArrayLike<number>, want: number[]): void {
  expect(got.length).toBe(want.length);
  for (let i = 0; i < want.length; i++) expect(Math.abs(got[i]! - want[i]!), `entry ${i}: ${got[i]} vs ${want[i]}`).toBeLessThanOrEqual(1e-15 * want[i]!);
}

describe("RoPE scaling", () => {
  it("ropeInverseFrequencies: plain, linear and llama3 (kept, interpolated and divided pairs all present)", () => {
    closeTo(ropeInverseFrequencies(16, 10000), expected(16, 10000));
    closeTo(ropeInverseFrequencies(16, 10000, linear), expected(16, 10000, linear));
    const got = ropeInverseFrequencies(16, 10000, llama3);
    closeTo(got, expected(16, 10000, llama3));
    const plain = expected(16, 10000);
    const ratio = Array.from(got, (v, i) => v / plain[i]!);
    expect(ratio.filter((r) => r === 1).length).toBeGreaterThanOrEqual(2); // high frequencies kept
    expect(ratio.filter((r) => Math.abs(r - 1 / 8) < 1e-15).length).toBeGreaterThanOrEqual(2); // low frequencies divided by the factor
    expect(ratio.filter((r) => r > 1 / 8 + 1e-6 && r < 1 - 1e-6).length).toBeGreaterThanOrEqual(1); // the band between, interpolated
    // Llama 3.1 8B's table (d 128, theta 500000, factor 8, 1 and 4, context 8192): first and last entries
    const llama31 = ropeInverseFrequencies(128, 500000, { type: "llama3", factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositions: 8192 });
    expect(llama31[0]).toBe(1);
    expect(llama31[63]! / (500000 ** (-126 / 128) / 8)).toBeCloseTo(1, 12);
  });

  it("ropeInverseFrequencies: yarn kept, ramped and interpolated pairs, truncated or not; its attention factor", () => {
    const got = ropeInverseFrequencies(16, 10000, yarn);
    closeTo(got, expected(16, 10000, yarn));
    const plain = expected(16, 10000);
    const ratio = Array.from(got, (v, i) => v / plain[i]!);
    // low 0, high 4: pair 0 kept, pairs 1 to 3 a quarter of the way more each toward 1 / factor, 4 to 7 divided by the factor
    expect(ratio[0]).toBe(1);
    for (let i = 1; i < 4; i++) expect(ratio[i]).toBeCloseTo(1 - (i / 4) * 0.75, 12);
    for (let i = 4; i < 8; i++) expect(ratio[i]).toBeCloseTo(0.25, 12);
    const loose = { ...yarn, truncate: false };
    closeTo(ropeInverseFrequencies(16, 10000, loose), expected(16, 10000, loose));
    expect(ropeInverseFrequencies(16, 10000, loose)[1]).not.toBe(got[1]);
    // Qwen3 with YaRN to 131072 (d 128, theta 1e6, factor 4, L 32768): pairs 0..23 kept (128 ln(32768 / 64 pi) / (2 ln 1e6) = 23.6,
    // floored), the slow end at ceil(128 ln(32768 / 2 pi) / (2 ln 1e6)) = ceil(39.65) = 40, every pair from 40 divided by 4
    const qwen3 = ropeInverseFrequencies(128, 1e6, { ...yarn, originalMaxPositions: 32768 });
    expect(qwen3[22]).toBe(1e6 ** (-44 / 128));
    expect(qwen3[40]! / (1e6 ** (-80 / 128) / 4)).toBeCloseTo(1, 12);
    expect(qwen3[30]! / 1e6 ** (-60 / 128)).toBeCloseTo(1 - (7 / 17) * 0.75, 12);
    expect(ropeAttentionFactor(yarn)).toBe(1.25);
    expect([ropeAttentionFactor(), ropeAttentionFactor(linear), ropeAttentionFactor(llama3)]).toEqual([1, 1, 1]);
  });

  for (const [label, positions] of [
    ["offset 5", 5],
    ["per-token positions", Int32Array.from([0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 300, 301, 302, 303])],
  ] as [string, number | Int32Array][]) {
    it(`OrtOps rope forward and backward with linear, llama3 and yarn scaling equal the float64 reference (${label})`, async () => {
      const x = randomTensor([2, 7, 3, 16], random);
      for (const scaling of [linear, llama3, yarn]) {
        for (const [sign, direction] of [
          [1, "ropeForward"],
          [-1, "ropeBackward"],
        ] as const) {
          const want = ropeRotate64(x, positions, 10000, sign, direction, scaling);
          const got = await ort[direction](x, positions, 10000, scaling);
          expect(maxRelativeError(got, want), `${direction} ${scaling.type}`).toBeLessThanOrEqual(1e-5);
          expect(maxRelativeError(await ref[direction](x, positions, 10000, scaling), want)).toBeLessThanOrEqual(1e-6);
          // the scaling changes the result (the cached plain table is not reused)
          expect(maxRelativeError(await ort[direction](x, positions, 10000), want), `${direction} ${scaling.type}, plain`).toBeGreaterThan(1e-3);
        }
      }
    });
  }

  it("the reference applies the scaled frequencies: pair i of token t turns by t * inv_freq[i]", () => {
    // x = 1 in slot i of one head: the rotated pair is (cos, sin) of the angle
    const d = 16;
    const x = randomTensor([1, 4, 1, d], random);
    x.data.fill(0);
    for (let t = 0; t < 4; t++) x.data[t * d + 6] = 1;
    const y = ropeRotate64(x, 100, 10000, 1, "rope", llama3);
    const inv = expected(d, 10000, llama3)[6]!;
    for (let t = 0; t < 4; t++) {
      expect(y.data[t * d + 6]).toBeCloseTo(Math.cos((100 + t) * inv), 12);
      expect(y.data[t * d + 6 + d / 2]).toBeCloseTo(Math.sin((100 + t) * inv), 12);
    }
    // yarn: (cos, sin) times its attention factor, in forward and backward
    for (const sign of [1, -1] as const) {
      const z = ropeRotate64(x, 100, 10000, sign, "rope", yarn);
      const angle = expected(d, 10000, yarn)[6]!;
      for (let t = 0; t < 4; t++) {
        expect(z.data[t * d + 6]).toBeCloseTo(1.25 * Math.cos((100 + t) * angle), 12);
        expect(z.data[t * d + 6 + d / 2]).toBeCloseTo(1.25 * sign * Math.sin((100 + t) * angle), 12);
      }
    }
  });

  it("cache keys differ with every field of the scaling", () => {
    const keys = [
      undefined,
      linear,
      { ...linear, factor: 4 },
      llama3,
      { ...llama3, factor: 4 },
      { ...llama3, lowFreqFactor: 2 },
      { ...llama3, highFreqFactor: 5 },
      { ...llama3, originalMaxPositions: 1024 },
      yarn,
      { ...yarn, factor: 2 },
      { ...yarn, originalMaxPositions: 1024 },
      { ...yarn, betaFast: 16 },
      { ...yarn, betaSlow: 2 },
      { ...yarn, attentionFactor: 1 },
      { ...yarn, truncate: false },
    ].map((s) => ropeScalingKey(s as RopeScaling | undefined));
    expect(new Set(keys).size).toBe(keys.length);
  });

  it("refuses a malformed scaling, naming the field", async () => {
    const cases: [unknown, RegExp][] = [
      [null, /^ropeForward: scaling must be an object or absent, got null$/],
      [{ type: "dynamic", factor: 2 }, /^ropeForward: scaling\.type must be one of "linear", "llama3", "yarn", got "dynamic"$/],
      [{ type: "toString", factor: 2 }, /^ropeForward: scaling\.type must be one of "linear", "llama3", "yarn", got "toString"$/],
      [{ type: "yarn", factor: 2 }, /^ropeForward: scaling\.originalMaxPositions must be a finite number > 0, got undefined$/],
      [{ ...yarn, truncate: 1 }, /^ropeForward: scaling\.truncate must be true or false, got 1$/],
      [{ ...yarn, betaSlow: 32 }, /^ropeForward: scaling\.betaFast \(32\) must be greater than scaling\.betaSlow \(32\)$/],
      [{ ...yarn, originalMaxPositions: 0.5 }, /^ropeForward: scaling\.originalMaxPositions must be an integer from 1 to 2147483648, got 0.5$/],
      [{ type: "linear" }, /^ropeForward: scaling\.factor must be a finite number > 0, got undefined$/],
      [{ type: "linear", factor: 2, lowFreqFactor: 1 }, /^ropeForward: scaling\.lowFreqFactor is not a field of a linear RoPE scaling/],
      [{ ...llama3, factor: Number.NaN }, /^ropeForward: scaling\.factor must be a finite number > 0, got null$/],
      [{ ...llama3, highFreqFactor: 1 }, /^ropeForward: scaling\.highFreqFactor \(1\) must be greater than scaling\.lowFreqFactor \(1\)$/],
      [{ ...llama3, originalMaxPositions: 1.5 }, /^ropeForward: scaling\.originalMaxPositions must be an integer from 1 to 2147483648, got 1.5$/],
    ];
    const x = randomTensor([1, 2, 1, 4], random);
    for (const [scaling, message] of cases) {
      for (const ops of [ort, ref]) {
        const call = ops.ropeForward(x, 0, 10000, scaling as RopeScaling);
        await expect(call).rejects.toThrow(KernelError);
        await expect(ops.ropeForward(x, 0, 10000, scaling as RopeScaling)).rejects.toThrow(message);
      }
    }
    expect(ropeScalingProblem(llama3)).toBeUndefined();
    expect(ropeScalingProblem({ ...linear, factor: Infinity }, "rope")).toBe("rope.factor must be a finite number > 0, got null");
  });
});
