/**
 * Runs a cached session with pre-allocated outputs: ONNX Runtime writes each
 * output straight into the given tensor's memory (which may be a view into a
 * larger buffer). Sessions still come from (and are owned by) the
 * SessionCache.
 *
 * The output tensors must be onnxruntime-node's own Tensor class: the
 * session recognises pre-allocated outputs with `instanceof`, and the ESM
 * onnxruntime-common that @ulysses/tensors' toOrt uses is a different class
 * from the CommonJS one onnxruntime-node loads (outputs would silently be
 * allocated instead). onnxruntime-node 1.30 still copies every output into a
 * new JS buffer after the run; callers ignore those copies.
 */
import type { Tensor } from "@ulysses/tensors";
import * as ort from "onnxruntime-node";
import { KernelError } from "../errors.js";
import type { SessionCache } from "../runtime/session-cache.js";

export async function runInto(
  cache: SessionCache,
  key: string,
  build: () => Uint8Array,
  feeds: Record<string, Tensor<"float32">>,
  outputs: Record<string, Tensor<"float32">>,
): Promise<void> {
  const session = await cache.session(key, build);
  const ortFeeds: Record<string, ort.Tensor> = {};
  for (const [name, t] of Object.entries(feeds)) ortFeeds[name] = new ort.Tensor("float32", t.data as Float32Array, [...t.shape]);
  const ortOutputs: Record<string, ort.Tensor> = {};
  for (const [name, t] of Object.entries(outputs)) ortOutputs[name] = new ort.Tensor("float32", t.data as Float32Array, [...t.shape]);
  try {
    await session.run(ortFeeds, ortOutputs);
  } catch (cause) {
    const shapes = Object.entries(feeds).map(([n, t]) => `${n}: ${t}`).join(", ");
    throw new KernelError(`running '${key}' failed (${shapes}): ${(cause as Error).message ?? cause}`, { cause });
  }
}
