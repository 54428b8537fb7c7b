/**
 * LocalBlockAttention, the one-device attention of a block: its kernel calls
 * may block the calling thread (nothing of the block's is in flight around
 * them), unless its caller says otherwise; the results are the kernel's own.
 */
import { ReferenceAttention, type AttentionOptions, type LocalAttention } from "@ulysses/kernels";
import { maxRelativeError, randomTensor, seededRandom } from "@ulysses/kernels/testing";
import { describe, expect, it } from "vitest";
import { LocalBlockAttention } from "./block-attention.js";

/** ReferenceAttention, recording each call's onCallerThread. */
class Recording extends ReferenceAttention implements LocalAttention {
  readonly seen: string[] = [];
  override forward(...args: Parameters<LocalAttention["forward"]>) {
    this.seen.push(`forward ${String(args[3].onCallerThread)}`);
    return super.forward(...args);
  }
  override backward(...args: Parameters<LocalAttention["backward"]>) {
    this.seen.push(`backward ${String(args[6].onCallerThread)}`);
    return super.backward(...args);
  }
}

describe("LocalBlockAttention", () => {
  const random = seededRandom(3);
  const [q, k, v, dOut] = [0, 1, 2, 3].map(() => randomTensor([1, 6, 2, 4], random));

  it("lets its kernel run on the calling thread, forward and backward, unless the caller's options say false", async () => {
    for (const [given, expected] of [
      [undefined, "true"],
      [true, "true"],
      [false, "false"],
    ] as const) {
      const local = new Recording();
      const attention = new LocalBlockAttention(local);
      const options: AttentionOptions = { causal: true };
      if (given !== undefined) options.onCallerThread = given;
      const { out, context } = await attention.forward(q!, k!, v!, options);
      const grads = await attention.backward(context, dOut!);
      expect(local.seen).toEqual([`forward ${expected}`, `backward ${expected}`]);
      // the caller's options object is not changed
      expect(options.onCallerThread).toBe(given);
      const plain = new ReferenceAttention();
      const want = await plain.forward(q!, k!, v!, { causal: true });
      const wantGrads = await plain.backward(q!, k!, v!, want.out, dOut!, want.logSumExp, { causal: true });
      expect(maxRelativeError(out, want.out)).toBe(0);
      for (const key of ["dq", "dk", "dv"] as const) expect(maxRelativeError(grads[key], wantGrads[key])).toBe(0);
    }
  });
});
