/**
 * Worker for interop.test.ts: in one worker thread, alternates runs of an
 * ordinary onnxruntime-node InferenceSession (y = x + x) and of FusedAttention's
 * custom-op session, then posts every result to the parent, which checks them.
 */
import { parentPort, workerData } from "node:worker_threads";
import * as ort from "onnxruntime-node";
import onnxProto from "onnx-proto";
import { Tensor } from "@ulysses/tensors";
import { FusedAttention } from "../index.js";

const proto = onnxProto.onnx;

/** y = x + x on float32 [n]. */
function doubleModel(n: number): Uint8Array {
  const info = (name: string) => ({ name, type: { tensorType: { elemType: proto.TensorProto.DataType.FLOAT, shape: { dim: [{ dimValue: n }] } } } });
  const model = proto.ModelProto.create({
    irVersion: 8,
    opsetImport: [{ domain: "", version: 17 }],
    graph: { name: "double", node: [{ opType: "Add", input: ["x", "x"], output: ["y"] }], input: [info("x")], output: [info("y")] },
  });
  return proto.ModelProto.encode(model).finish();
}

const { rounds, shape } = workerData as { rounds: number; shape: [number, number, number, number] };
const x = Float32Array.from({ length: 8 }, (_, i) => i - 3);
const session = await ort.InferenceSession.create(doubleModel(x.length), { intraOpNumThreads: 1 });
const fused = new FusedAttention({ threads: 1 });
const q = new Tensor(
  "float32",
  shape,
  Float32Array.from({ length: shape.reduce((a, b) => a * b) }, (_, i) => Math.sin(i)),
);
const k = new Tensor(
  "float32",
  shape,
  Float32Array.from({ length: q.size }, (_, i) => Math.cos(i * 0.7)),
);
const results: { doubled: number[]; out: number[] }[] = [];
for (let r = 0; r < rounds; r++) {
  const { y } = await session.run({ x: new ort.Tensor("float32", x, [x.length]) });
  const { out } = await fused.forward(q, k, k, { causal: r % 2 === 0 });
  results.push({ doubled: Array.from(y!.data as Float32Array), out: Array.from(out.data) });
}
await session.release();
fused.release();
parentPort!.postMessage({ results, q: Array.from(q.data), k: Array.from(k.data) });
