// Consumer check: @ulysses/native-ops installed on its own (with
// @ulysses/tensors and @ulysses/kernels) built its addon at install time, and its forward and
// backward match a float64 attention written here, causal and not (one case within one block,
// one past the backward's 192-key blocks); FusedOps' native LayerNorm and rope match float64
// ones written here too, each split over a 2-thread cache; addInto and adamwUpdate give the bits of
// the JavaScript loops they stand for, written here too; an output given back with release comes
// back as the next output of its size, native or ONNX Runtime's, with the values of a fresh one.
// With onCallerThread the attention gives the same bits on the calling thread, which no event-loop
// turn interrupts, unless the call is past callerThreadMaxPairs.
import assert from "node:assert/strict";
import { relativeError } from "./compare.mjs";
import fs from "node:fs";
import { CALLER_THREAD_MAX_PAIRS, FusedAttention, NativeSessionCache, createFusedOps, fusedAttentionStatus } from "@ulysses/native-ops";
import { SessionCache } from "@ulysses/kernels";
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

const next = random(7);
const attention = new FusedAttention({ threads: 1 });
try {
  for (const dims of [
    [2, 37, 4, 2, 16],
    [1, 200, 2, 1, 32],
  ]) {
    const [b, n, h, g, d] = dims;
    const make = (heads) => Tensor.from("float32", [b, n, heads, d], Array.from({ length: b * n * heads * d }, next));
    const q = make(h);
    const k = make(g);
    const v = make(g);
    const dOut = make(h);
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
      for (const [name, error] of Object.entries(errors))
        assert.ok(error < 1e-4, `[${dims}] causal ${causal}: ${name} relative error ${error} against float64`);
      // on the calling thread: the bits of the pool's run, checked above against float64
      const here = await attention.forward(q, k, v, { causal, onCallerThread: true });
      const hereGrads = await attention.backward(q, k, v, here.out, dOut, here.logSumExp, { causal, onCallerThread: true });
      for (const [name, a, b] of [
        ["out", here.out, out],
        ["logSumExp", here.logSumExp, logSumExp],
        ["dq", hereGrads.dq, grads.dq],
        ["dk", hereGrads.dk, grads.dk],
        ["dv", hereGrads.dv, grads.dv],
      ])
        assert.deepEqual(
          Buffer.from(a.data.buffer),
          Buffer.from(b.data.buffer),
          `[${dims}] causal ${causal}: ${name} on the calling thread differs from the pool's`,
        );
      console.log(
        `fused-attention: installed alone, built at install; [${dims}] causal ${causal}: max relative error vs float64 ${Math.max(...Object.values(errors)).toExponential(2)}`,
      );
    }
  }
} finally {
  attention.release();
}

// Where the calls run: an immediate set before a call runs at the event loop's next check phase, before a pool
// run of 1024 tokens can complete, and never inside a call that blocks the calling thread
{
  assert.equal(CALLER_THREAD_MAX_PAIRS, 2 ** 30, "CALLER_THREAD_MAX_PAIRS");
  const [b, n, h, g, d] = [1, 1024, 4, 2, 32];
  const make = (heads) => Tensor.from("float32", [b, n, heads, d], Array.from({ length: b * n * heads * d }, next));
  const [q, k, v] = [make(h), make(g), make(g)];
  const turned = async (fused, options) => {
    let turn = false;
    setImmediate(() => {
      turn = true;
    });
    await fused.forward(q, k, v, options);
    return turn;
  };
  const fused = new FusedAttention({ threads: 2 });
  const capped = new FusedAttention({ threads: 2, callerThreadMaxPairs: (h * n * n) / 2 - 1 }); // one pair short of this call
  try {
    assert.equal(await turned(fused, { causal: true }), true, "a pool run let the event loop turn");
    assert.equal(await turned(fused, { causal: true, onCallerThread: true }), false, "an onCallerThread run let the event loop turn");
    assert.equal(await turned(capped, { causal: true, onCallerThread: true }), true, "a run past callerThreadMaxPairs did not go to the pool");
  } finally {
    fused.release();
    capped.release();
  }
  console.log(
    "fused-attention: onCallerThread runs block the calling thread (no event-loop turn), the same bits as the pool's; past callerThreadMaxPairs they go to the pool",
  );
}

// FusedOps: LayerNorm over rows of 256 and rope ("rotate half", positions from 3) against float64 written here
const cache = new SessionCache({ intraOpThreads: 2 });
try {
  const ops = createFusedOps(cache);
  const [rows, hidden] = [600, 256];
  const x = Tensor.from(
    "float32",
    [rows, hidden],
    Array.from({ length: rows * hidden }, () => 3 + 4 * next()),
  );
  const gamma = Tensor.from("float32", [hidden], Array.from({ length: hidden }, next));
  const beta = Tensor.from("float32", [hidden], Array.from({ length: hidden }, next));
  const dy = Tensor.from("float32", [rows, hidden], Array.from({ length: rows * hidden }, next));
  const y64 = new Float64Array(rows * hidden);
  const dx64 = new Float64Array(rows * hidden);
  const dGamma64 = new Float64Array(hidden);
  const dBeta64 = new Float64Array(hidden);
  for (let r = 0; r < rows; r++) {
    const row = Array.from(x.data.subarray(r * hidden, (r + 1) * hidden));
    const mean = row.reduce((a, c) => a + c, 0) / hidden;
    const rstd = 1 / Math.sqrt(row.reduce((a, c) => a + (c - mean) ** 2, 0) / hidden + 1e-5);
    const xhat = row.map((c) => (c - mean) * rstd);
    const g = xhat.map((_, i) => dy.data[r * hidden + i] * gamma.data[i]);
    const meanG = g.reduce((a, c) => a + c, 0) / hidden;
    const meanGx = g.reduce((a, c, i) => a + c * xhat[i], 0) / hidden;
    for (let i = 0; i < hidden; i++) {
      y64[r * hidden + i] = xhat[i] * gamma.data[i] + beta.data[i];
      dx64[r * hidden + i] = rstd * (g[i] - meanG - xhat[i] * meanGx);
      dGamma64[i] += dy.data[r * hidden + i] * xhat[i];
      dBeta64[i] += dy.data[r * hidden + i];
    }
  }
  const forward = await ops.layerNormForward(x, gamma, beta, 1e-5);
  const backward = await ops.layerNormBackward(x, gamma, forward, dy);
  const normErrors = {
    y: relativeError(forward.y.data, y64),
    dx: relativeError(backward.dx.data, dx64),
    dGamma: relativeError(backward.dGamma.data, dGamma64),
    dBeta: relativeError(backward.dBeta.data, dBeta64),
  };
  for (const [name, error] of Object.entries(normErrors)) assert.ok(error < 1e-5, `LayerNorm ${name}: relative error ${error} against float64`);

  const [batch, seq, heads, headDim] = [2, 600, 4, 32]; // 153600 floats: split over both threads, at token 600
  const half = headDim / 2;
  const xr = Tensor.from("float32", [batch, seq, heads, headDim], Array.from({ length: batch * seq * heads * headDim }, next));
  const rotate = (sign) => {
    const out = new Float64Array(xr.size);
    for (let bi = 0; bi < batch; bi++)
      for (let t = 0; t < seq; t++)
        for (let i = 0; i < half; i++) {
          const angle = sign * (3 + t) * 10000 ** ((-2 * i) / headDim);
          for (let hi = 0; hi < heads; hi++) {
            const o = ((bi * seq + t) * heads + hi) * headDim;
            const [a, c] = [xr.data[o + i], xr.data[o + i + half]];
            out[o + i] = a * Math.cos(angle) - c * Math.sin(angle);
            out[o + i + half] = c * Math.cos(angle) + a * Math.sin(angle);
          }
        }
    return out;
  };
  const ropeErrors = {
    forward: relativeError((await ops.ropeForward(xr, 3)).data, rotate(1)),
    backward: relativeError((await ops.ropeBackward(xr, 3)).data, rotate(-1)),
  };
  for (const [name, error] of Object.entries(ropeErrors)) assert.ok(error < 1e-5, `rope ${name}: relative error ${error} against float64`);
  const worst = Math.max(...Object.values(normErrors), ...Object.values(ropeErrors));
  console.log(`fused-attention: FusedOps LayerNorm and rope, 2 threads: max relative error vs float64 ${worst.toExponential(2)}`);
} finally {
  await cache.release();
}

// FusedOps' addInto and adamwUpdate, as installed: the same bits as the JavaScript they stand for, written here
// (a float32 sum per element; AdamW in float64 per element, rounded to float32 on store)
{
  const addCache = new SessionCache({ intraOpThreads: 1 });
  try {
    const ops = createFusedOps(addCache);
    const n = 1003; // whole vectors and a tail
    const target = Float32Array.from({ length: n }, () => 1e3 * next());
    const term = Float32Array.from({ length: n }, () => 1e-3 * next());
    const expected = Float32Array.from(target, (t, i) => t + term[i]);
    ops.addInto(new Tensor("float32", [n], target), new Tensor("float32", [n], term));
    assert.deepEqual(Buffer.from(target.buffer), Buffer.from(expected.buffer), "addInto: not the bits of a float32 sum per element");

    const [beta1, beta2, eps, lr, weightDecay, step] = [0.9, 0.95, 1e-8, 3e-3, 0.1, 4];
    const [c1, c2, decay] = [1 - beta1 ** step, 1 - beta2 ** step, lr * weightDecay];
    const params = Float32Array.from({ length: n }, next);
    const grads = Float32Array.from({ length: n }, next);
    const m = Float32Array.from({ length: n }, () => 0.1 * next());
    const v = Float32Array.from({ length: n }, () => 0.01 * (next() + 0.5));
    const decayMask = Uint8Array.from({ length: n }, (_, i) => (i % 3 === 0 ? 0 : 1));
    const want = { params: new Float32Array(n), m: new Float32Array(n), v: new Float32Array(n) };
    // the step as @ulysses/training's AdamW computes it: (lr / c1) m / (sqrt(v) * (1 / sqrt(c2)) + eps)
    const [stepSize, invSqrtC2] = [lr / c1, 1 / Math.sqrt(c2)];
    for (let i = 0; i < n; i++) {
      const g = grads[i];
      let p = params[i];
      if (decayMask[i] === 1) p -= decay * p;
      const mi = beta1 * m[i] + (1 - beta1) * g;
      const vi = beta2 * v[i] + (1 - beta2) * g * g;
      want.m[i] = mi;
      want.v[i] = vi;
      want.params[i] = p - (stepSize * mi) / (Math.sqrt(vi) * invSqrtC2 + eps);
    }
    ops.adamwUpdate({ params, grads, m, v, decayMask, beta1, beta2, eps, lr, decay, c1, c2 });
    for (const [name, got] of Object.entries({ params, m, v }))
      assert.deepEqual(Buffer.from(got.buffer), Buffer.from(want[name].buffer), `adamwUpdate: ${name} not the bits of the float64 loop`);
    console.log(`fused-attention: FusedOps addInto and adamwUpdate (${n} elements): bit for bit with the JavaScript loops`);
  } finally {
    await addCache.release();
  }
}

// FusedOps.release and NativeSessionCache's pool, as installed: a released output is the next output of
// its size (a GELU's, then an ONNX Runtime MatMul's), and gives the values of a cache without a pool
{
  const pooled = new NativeSessionCache({ intraOpThreads: 1, memoryArena: true, poisonReleased: true });
  const plain = new NativeSessionCache({ intraOpThreads: 1, memoryArena: true, outputPoolBytes: 0 });
  try {
    const ops = createFusedOps(pooled);
    const fresh = createFusedOps(plain);
    const x = new Tensor("float32", [16, 32], Float32Array.from({ length: 512 }, next));
    const w = new Tensor("float32", [32, 32], Float32Array.from({ length: 1024 }, next));
    for (const o of [ops, fresh]) await o.linearForward(x, w); // the first run of a graph goes through onnxruntime-node
    const gelu = await ops.geluForward(x);
    ops.release(gelu);
    const y = await ops.linearForward(x, w);
    assert.equal(y.data.buffer, gelu.data.buffer, "release: the next [16, 32] output did not reuse the released buffer");
    assert.deepEqual(Array.from(y.data), Array.from((await fresh.linearForward(x, w)).data), "release: a reused output's values differ");
    ops.release(y);
    const again = await ops.geluForward(x);
    assert.equal(again.data.buffer, gelu.data.buffer, "release: the native GELU did not reuse the released buffer");
    assert.deepEqual(Array.from(again.data), Array.from((await fresh.geluForward(x)).data), "release: a reused GELU's values differ");
    console.log("fused-attention: FusedOps.release hands outputs back to NativeSessionCache's pool, reused with fresh outputs' values");
  } finally {
    await pooled.release();
    await plain.release();
  }
}
