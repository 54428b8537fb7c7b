/**
 * Measures FusedAttention: forward and forward+backward GFLOP/s for
 * N = 1024, 4096, 16384 (b = 1, 8 heads of 64), causal and not, on 1 and 2
 * threads, next to onnxruntime-node's MatMul on the same threads for scale.
 * Prints a table and writes bench-results/fused-attention.json at the repo root.
 *
 * FLOP convention ("useful" work): forward 4·b·h·N²·d, backward 8·b·h·N²·d,
 * both halved when causal. The main figure uses the best wall time of the
 * repetitions; the one in parentheses divides by the best process CPU time
 * divided by the thread count (the rate had every thread kept its core: the
 * project's machines are shared, so wall times include preemption).
 *
 *   pnpm --filter @ulysses/fused-attention bench [-- --sizes 1024,4096 --threads 1,2]
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import * as ort from "onnxruntime-node";
import onnxProto from "onnx-proto";
import { Tensor } from "@ulysses/tensors";
import { FusedAttention, fusedAttentionStatus } from "../src/index.js";

const { values } = parseArgs({
  args: process.argv.slice(2).filter((a) => a !== "--"),
  options: {
    sizes: { type: "string", default: "1024,4096,16384" },
    threads: { type: "string", default: "1,2" },
    heads: { type: "string", default: "8" },
    dim: { type: "string", default: "64" },
  },
});
const sizes = values.sizes.split(",").map(Number);
const threadCounts = values.threads.split(",").map(Number);
const heads = Number(values.heads);
const headDim = Number(values.dim);

interface Timing {
  wall: number;
  cpu: number;
}

async function time(fn: () => Promise<unknown>, reps: number, threads: number): Promise<Timing> {
  let best: Timing = { wall: Infinity, cpu: Infinity };
  for (let r = 0; r < reps; r++) {
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    await fn();
    const wall = (performance.now() - t0) / 1000;
    const used = process.cpuUsage(c0);
    const cpu = (used.user + used.system) / 1e6 / threads;
    best = { wall: Math.min(best.wall, wall), cpu: Math.min(best.cpu, cpu) };
  }
  return best;
}

function random(shape: number[], seed: number): Tensor<"float32"> {
  const t = new Tensor("float32", shape);
  let s = seed >>> 0;
  for (let i = 0; i < t.size; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    t.data[i] = s / 2147483648 - 1;
  }
  return t;
}

/** GFLOP/s of onnxruntime-node's MatMul [n, n] x [n, n] on `threads` threads. */
async function ortMatMul(threads: number, n = 1024): Promise<Timing & { gflops: number; cpuGflops: number }> {
  const proto = onnxProto.onnx;
  const info = (name: string) => ({ name, type: { tensorType: { elemType: proto.TensorProto.DataType.FLOAT, shape: { dim: [{ dimValue: n }, { dimValue: n }] } } } });
  const model = proto.ModelProto.encode(
    proto.ModelProto.create({
      irVersion: 8,
      opsetImport: [{ domain: "", version: 17 }],
      graph: { name: "matmul", node: [{ opType: "MatMul", input: ["a", "b"], output: ["c"] }], input: [info("a"), info("b")], output: [info("c")] },
    }),
  ).finish();
  const session = await ort.InferenceSession.create(model, { intraOpNumThreads: threads, interOpNumThreads: 1 });
  const feeds = { a: new ort.Tensor("float32", random([n, n], 1).data, [n, n]), b: new ort.Tensor("float32", random([n, n], 2).data, [n, n]) };
  await session.run(feeds);
  const t = await time(() => session.run(feeds), 10, threads);
  await session.release();
  const flops = 2 * n ** 3;
  return { ...t, gflops: flops / t.wall / 1e9, cpuGflops: flops / t.cpu / 1e9 };
}

const status = fusedAttentionStatus();
if (!status.available) {
  console.error(status.reason);
  process.exit(1);
}
console.log(`addon: ${status.path}`);
console.log(`ONNX Runtime ${status.info.ortVersion}, C API ${status.info.apiVersion}, CPU kernels ${status.info.cpuIsa}, CUDA compiled: ${status.info.cudaCompiled}`);

const rows: Record<string, unknown>[] = [];
const matmul: Record<number, unknown> = {};
for (const threads of threadCounts) {
  const m = await ortMatMul(threads);
  matmul[threads] = m;
  console.log(`ORT MatMul 1024^3, ${threads} thread(s): ${m.gflops.toFixed(1)} GFLOP/s wall, ${m.cpuGflops.toFixed(1)} per thread-CPU`);
}

console.log("\n    N  mask    thr |  fwd ms  fwd GF/s (cpu) | fwd+bwd ms  fwd+bwd GF/s (cpu)");
for (const n of sizes) {
  const q = random([1, n, heads, headDim], 3);
  const k = random([1, n, heads, headDim], 4);
  const v = random([1, n, heads, headDim], 5);
  const dOut = random([1, n, heads, headDim], 6);
  const reps = n <= 1024 ? 5 : n <= 4096 ? 2 : 1;
  for (const causal of [false, true]) {
    for (const threads of threadCounts) {
      const fused = new FusedAttention({ threads });
      const options = { causal };
      // Warm-up: sessions, pages of the outputs.
      const warm = await fused.forward(q, k, v, options);
      await fused.backward(q, k, v, warm.out, dOut, warm.logSumExp, options);
      const fwd = await time(() => fused.forward(q, k, v, options), reps, threads);
      const both = await time(async () => {
        const r = await fused.forward(q, k, v, options);
        await fused.backward(q, k, v, r.out, dOut, r.logSumExp, options);
      }, reps, threads);
      fused.release();
      const half = causal ? 0.5 : 1;
      const fwdFlops = 4 * heads * n * n * headDim * half;
      const bothFlops = 12 * heads * n * n * headDim * half;
      const row = {
        n, causal, threads, heads, headDim,
        forwardMs: fwd.wall * 1e3, forwardGflops: fwdFlops / fwd.wall / 1e9, forwardCpuGflops: fwdFlops / fwd.cpu / 1e9,
        forwardBackwardMs: both.wall * 1e3, forwardBackwardGflops: bothFlops / both.wall / 1e9, forwardBackwardCpuGflops: bothFlops / both.cpu / 1e9,
      };
      rows.push(row);
      console.log(
        `${String(n).padStart(5)}  ${(causal ? "causal" : "full").padEnd(6)}  ${threads}   | ${row.forwardMs.toFixed(1).padStart(7)}  ${row.forwardGflops.toFixed(1).padStart(6)} (${row.forwardCpuGflops.toFixed(1)}) | ${row.forwardBackwardMs.toFixed(1).padStart(9)}  ${row.forwardBackwardGflops.toFixed(1).padStart(6)} (${row.forwardBackwardCpuGflops.toFixed(1)})`,
      );
    }
  }
}

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const outFile = join(root, "bench-results", "fused-attention.json");
mkdirSync(dirname(outFile), { recursive: true });
writeFileSync(outFile, JSON.stringify({ when: new Date().toISOString(), addon: status.info, matmul, rows }, null, 2));
console.log(`\nwrote ${outFile}`);
