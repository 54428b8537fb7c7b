/**
 * What the tests of the addon's CPU kernels (weightGradient, matmul,
 * crossEntropy) share: the addon's status, the instruction sets this
 * processor runs, the binding, and uniform inputs.
 */
import { it } from "vitest";
import { fusedAttentionStatus } from "../index.js";
import { loadNative, type NativeBinding } from "../native.js";

export const nativeStatus = fusedAttentionStatus();

const nativeIsa = (nativeStatus.available ? nativeStatus.info.cpuIsa : "portable") as "avx512" | "avx2" | "portable";

/** The instruction sets this processor runs: the portable one always, AVX2 too where AVX-512 runs. */
export const RUNNABLE_ISAS = (["avx512", "avx2", "portable"] as const).filter(
  (isa) => isa === "portable" || isa === nativeIsa || (isa === "avx2" && nativeIsa === "avx512"),
);

/** The suite's name: `name`, or why it is skipped (the addon is not built). */
export function suiteName(name: string): string {
  return nativeStatus.available ? name : `${name.split(" (")[0]} (skipped: ${nativeStatus.reason})`;
}

/** The addon's binding; call only where the addon loads (inside a suite skipped otherwise). */
export function nativeBinding(): NativeBinding {
  const native = loadNative();
  if (!native.ok) throw native.error;
  return native.binding;
}

/** n floats uniform in [-1, 1) from `random`. */
export function uniformFloats(n: number, random: () => number): Float32Array {
  return Float32Array.from({ length: n }, () => random() * 2 - 1);
}

/** One test per instruction set this processor runs and thread count 1-3, titled "<isa>, <n> thread(s): <what>". */
export function itOnEveryIsa(what: string, body: (isa: (typeof RUNNABLE_ISAS)[number], threads: number) => void): void {
  for (const isa of RUNNABLE_ISAS) for (const threads of [1, 2, 3]) it(`${isa}, ${threads} thread${threads > 1 ? "s" : ""}: ${what}`, () => body(isa, threads));
}
