// Consumer check: @ulysses/fused-attention installed on its own (with
// @ulysses/tensors and @ulysses/kernels) built its addon at install time, and its forward and
// backward match a float64 attention written here, causal and not.
import assert from "node:assert/strict";
import { relativeError } from "./compare.mjs";
import fs from "node:fs";
import { FusedAttention, fusedAttentionStatus } from "@ulysses/fused-attention";
import { Tensor } from "@ulysses/tensors";

const status = fusedAttentionStatus();
assert.equal(status.available, true, `the addon did not build at install: ${status.reason}`);
assert.ok(fs.realpathSync(status.path).startsWith(fs.realpathSync(process.cwd())), `the addon ${status.path} is not the one installed here`);

function random(seed) {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32 - 0.5;
  };
}

/** Float64 attention, q [b, n, h, d], k/v [b, n, g, d] (h/g queries share a kv head); gradients for dOut. */
function reference(q, k, v, dOut, [b, n, h, g, d], causal) {
  const scale = 1 / Math.sqrt(d);
  const at = (x, heads, bi, i, hi, e) => x[((bi * n + i) * heads + hi) * d + e];
  const out = new Float64Array(b * n * h * d);
  const dq = new Float64Array(q.length);
  const dk = new Float64Array(k.length);
  const dv = new Float64Array(v.length);
  for (let bi = 0; bi < b; bi++) {
    for (let hi = 0; hi < h; hi++) {
      const gi = Math.floor(hi / (h / g));
      for (let i = 0; i < n; i++) {
        const last = causal ? i : n - 1;
        const p = new Float64Array(last + 1);
        let max = -Infinity;
        for (let j = 0; j <= last; j++) {
          let s = 0;
          for (let e = 0; e < d; e++) s += at(q, h, bi, i, hi, e) * at(k, g, bi, j, gi, e);
          p[j] = s * scale;
          max = Math.max(max, p[j]);
        }
        let sum = 0;
        for (let j = 0; j <= last; j++) sum += p[j] = Math.exp(p[j] - max);
        for (let j = 0; j <= last; j++) p[j] /= sum;
        const o = ((bi * n + i) * h + hi) * d;
        for (let j = 0; j <= last; j++) for (let e = 0; e < d; e++) out[o + e] += p[j] * at(v, g, bi, j, gi, e);
        // dP = dOut . v, dS = P * (dP - sum(P * dP))
        const dp = new Float64Array(last + 1);
        let dot = 0;
        for (let j = 0; j <= last; j++) {
          for (let e = 0; e < d; e++) dp[j] += dOut[o + e] * at(v, g, bi, j, gi, e);
          dot += p[j] * dp[j];
        }
        for (let j = 0; j <= last; j++) {
          const ds = p[j] * (dp[j] - dot) * scale;
          const kv = ((bi * n + j) * g + gi) * d;
          for (let e = 0; e < d; e++) {
            dq[o + e] += ds * k[kv + e];
            dk[kv + e] += ds * q[o + e];
            dv[kv + e] += p[j] * dOut[o + e];
          }
        }
      }
    }
  }
  return { out, dq, dk, dv };
}

const dims = [2, 37, 4, 2, 16];
const [b, n, h, g, d] = dims;
const next = random(7);
const make = (heads) => Tensor.from("float32", [b, n, heads, d], Array.from({ length: b * n * heads * d }, next));
const q = make(h);
const k = make(g);
const v = make(g);
const dOut = make(h);
const attention = new FusedAttention({ threads: 1 });
try {
  for (const causal of [false, true]) {
    const expected = reference(q.data, k.data, v.data, dOut.data, dims, causal);
    const { out, logSumExp } = await attention.forward(q, k, v, { causal });
    const grads = await attention.backward(q, k, v, out, dOut, logSumExp, { causal });
    const errors = {
      out: relativeError(out.data, expected.out),
      dq: relativeError(grads.dq.data, expected.dq),
      dk: relativeError(grads.dk.data, expected.dk),
      dv: relativeError(grads.dv.data, expected.dv),
    };
    for (const [name, error] of Object.entries(errors)) assert.ok(error < 1e-4, `causal ${causal}: ${name} relative error ${error} against float64`);
    console.log(
      `fused-attention: installed alone, built at install; causal ${causal}: max relative error vs float64 ${Math.max(...Object.values(errors)).toExponential(2)}`,
    );
  }
} finally {
  attention.release();
}
