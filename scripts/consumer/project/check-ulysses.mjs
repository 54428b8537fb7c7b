// Consumer check: UlyssesAttention (ONNX Runtime local attention) over 2
// ranks equals the 1-rank run within 1e-6, forward and backward: with each
// kv head on one rank (kvHeads 2), and with one kv head on both ranks
// (kvHeads 1: its gradients summed over the copies).
import assert from "node:assert/strict";
import { relativeError } from "./compare.mjs";
import { launch } from "@ulysses/collectives";

const problems = [
  { batch: 2, seq: 30, heads: 4, kvHeads: 2, headDim: 8, causal: true, seed: 11 },
  { batch: 2, seq: 30, heads: 4, kvHeads: 1, headDim: 8, causal: true, seed: 12 },
];

async function run(worldSize, problem) {
  const world = await launch({ worldSize, entry: new URL("./rank-ulysses.mjs", import.meta.url), timeoutMs: 60_000, ortThreadsPerRank: 1 });
  try {
    return await world.all("run", problem);
  } finally {
    await world.shutdown();
  }
}

/** Joins [b, s_r, h, D] shards along the sequence axis. */
function join(shards) {
  const [batch, , heads, headDim] = shards[0].shape;
  const row = heads * headDim;
  const seq = shards.reduce((n, s) => n + s.shape[1], 0);
  const out = new Float32Array(batch * seq * row);
  for (let b = 0; b < batch; b++) {
    let offset = b * seq * row;
    for (const s of shards) {
      const n = s.shape[1] * row;
      out.set(s.data.subarray(b * n, (b + 1) * n), offset);
      offset += n;
    }
  }
  return out;
}

for (const problem of problems) {
  const one = await run(1, problem);
  const two = await run(2, problem);
  const errors = {};
  for (const key of ["out", "dq", "dk", "dv"]) {
    errors[key] = relativeError(join(two.map((r) => r[key])), join(one.map((r) => r[key])));
    assert.ok(errors[key] <= 1e-6, `kvHeads ${problem.kvHeads}: ${key}: 2 ranks vs 1 rank relative error ${errors[key]}`);
  }
  console.log(
    `block: UlyssesAttention on 2 ranks equals 1 rank, kvHeads ${problem.kvHeads} (max relative error ${Math.max(...Object.values(errors)).toExponential(2)})`,
  );
}
