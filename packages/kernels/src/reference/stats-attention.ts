/**
 * StatsReferenceAttention: ReferenceAttention's forward, and a float64
 * backward that, as the LocalAttention contract says and OrtAttention and
 * FusedAttention do, takes the probabilities from the logSumExp it is given
 * (P_ij = exp(scale q_i . k_j - lse_i)) and D_i = dOut_i . out_i from the out
 * it is given. ReferenceAttention recomputes both from q and k, which is
 * exact for its own forward but not for a block of ring attention, whose
 * backward gets the lse and out merged over every block (@ulysses/parallel's
 * RingAttention refuses it). For tests of such wrappers; written from the
 * formulas, independent of the code it checks.
 */
import { Tensor } from "@ulysses/tensors";
import { attentionDims } from "../attention/shapes.js";
import type { AttentionForwardResult, AttentionGradients, AttentionOptions, LocalAttention } from "../attention/types.js";
import { ReferenceAttention } from "./attention.js";

type F32 = Tensor<"float32">;

export class StatsReferenceAttention implements LocalAttention {
  readonly name = "reference-stats";
  private readonly reference = new ReferenceAttention();

  forward(q: F32, k: F32, v: F32, options: AttentionOptions): Promise<AttentionForwardResult> {
    return this.reference.forward(q, k, v, options);
  }

  async backward(q: F32, k: F32, v: F32, out: F32, dOut: F32, logSumExp: F32, options: AttentionOptions): Promise<AttentionGradients> {
    const dims = attentionDims(q, k, v, options, "StatsReferenceAttention.backward");
    const { batch, seqQ, seqK, heads, kvHeads, headDim: d, scale, group, offset, causal, documents } = dims;
    const dq = new Float64Array(q.size);
    const dk = new Float64Array(k.size);
    const dv = new Float64Array(k.size);
    for (let b = 0; b < batch; b++) {
      for (let h = 0; h < heads; h++) {
        const g = Math.floor(h / group);
        for (let i = 0; i < seqQ; i++) {
          const lse = logSumExp.data[(b * heads + h) * seqQ + i]!;
          if (lse === -Infinity) continue;
          const qOff = ((b * seqQ + i) * heads + h) * d;
          let rowDot = 0;
          for (let e = 0; e < d; e++) rowDot += dOut.data[qOff + e]! * out.data[qOff + e]!;
          for (let j = 0; j < seqK; j++) {
            if (causal && j > i + offset) continue;
            if (documents !== undefined && documents.query[b * seqQ + i] !== documents.key[b * seqK + j]) continue;
            const kvOff = ((b * seqK + j) * kvHeads + g) * d;
            let s = 0;
            let dp = 0;
            for (let e = 0; e < d; e++) {
              s += q.data[qOff + e]! * k.data[kvOff + e]!;
              dp += dOut.data[qOff + e]! * v.data[kvOff + e]!;
            }
            const p = Math.exp(scale * s - lse);
            const ds = p * (dp - rowDot) * scale;
            for (let e = 0; e < d; e++) {
              dv[kvOff + e]! += p * dOut.data[qOff + e]!;
              dq[qOff + e]! += ds * k.data[kvOff + e]!;
              dk[kvOff + e]! += ds * q.data[qOff + e]!;
            }
          }
        }
      }
    }
    const f32 = (shape: readonly number[], x: Float64Array) => new Tensor("float32", shape, Float32Array.from(x));
    return { dq: f32(q.shape, dq), dk: f32(k.shape, dk), dv: f32(k.shape, dv) };
  }

  release(): void {}
}
