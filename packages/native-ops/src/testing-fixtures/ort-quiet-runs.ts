/**
 * Fixture for ort-stderr.test.ts (run as its own process, so that ONNX
 * Runtime's native log lines reach a stderr the test can read): the session
 * kinds the suite uses (onnxruntime-node's SessionCache, the addon's
 * NativeSessionCache, FusedAttention) each run a small graph, then the
 * negative cases the suite also runs: a feed of the wrong shape, bytes that
 * are no model, and FusedAttention asked for the CUDA provider where
 * onnxruntime-node has no CUDA binaries. Each expected error is caught and
 * printed to stdout as "expected: <message>"; the last line is "done".
 */
import { GraphBuilder, SessionCache } from "@ulysses/kernels";
import { Tensor } from "@ulysses/tensors";
import { FusedAttention, NativeSessionCache } from "../index.js";

async function expectError(what: string, action: () => unknown): Promise<void> {
  try {
    await action();
  } catch (error) {
    console.log(`expected: ${what}: ${(error as Error).message.split("\n")[0]}`);
    return;
  }
  throw new Error(`${what}: no error`);
}

const build = () => {
  const g = new GraphBuilder("quiet-matmul");
  const a = g.input("a", "float32", [2, 3]);
  const b = g.input("b", "float32", [3, 2]);
  g.output(g.op("MatMul", [a, b]), "c");
  return g.encode();
};
for (const cache of [new SessionCache({ intraOpThreads: 1 }), new NativeSessionCache({ intraOpThreads: 1 })]) {
  await cache.run("quiet-matmul", build, { a: new Tensor("float32", [2, 3]), b: new Tensor("float32", [3, 2]) });
  await expectError("a feed of the wrong shape", () =>
    cache.run("quiet-matmul", build, { a: new Tensor("float32", [2, 4]), b: new Tensor("float32", [3, 2]) }),
  );
  await expectError("bytes that are no model", () => cache.run("quiet-garbage", () => new Uint8Array([1, 2, 3]), {}));
  await cache.release();
}
const fused = new FusedAttention({ threads: 1 });
const q = new Tensor("float32", [1, 4, 2, 8]);
await fused.forward(q, q, q, { causal: true });
fused.release();
await expectError("the CUDA provider", () => new FusedAttention({ threads: 1, executionProvider: "cuda" }));
console.log("done");
