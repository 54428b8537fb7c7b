/**
 * The GPT's forward pass, written once over an abstract `GptMath<T>`:
 * training runs it on tensors (`gpt.ts`), ONNX export on graph values
 * (`export-onnx.ts`). Each layer is the block's own definition
 * (`blockForward` of @ulysses/block), rows = b * s:
 *
 *   x = embed(ids)            [rows, hidden]
 *   x = block_l(x)            for l = 0 .. layers - 1
 *   logits = head(norm(x))    [rows, vocab] (head: the embedding, transposed, when tied)
 */
import type { GptConfig } from "./gpt-config.js";

export interface GptMath<T> {
  /** The token embedding of the input ids: [rows, hidden]. */
  embed(): Promise<T>;
  /** Layer `layer`'s transformer block: [rows, hidden] -> [rows, hidden]. */
  block(layer: number, x: T): Promise<T>;
  /** The final norm (weights `norm.gamma`, `norm.beta`). */
  norm(x: T): Promise<T>;
  /** The LM head: [rows, hidden] -> logits [rows, vocab]. */
  head(x: T): Promise<T>;
}

export async function gptForward<T>(config: GptConfig, m: GptMath<T>): Promise<T> {
  let x = await m.embed();
  for (let layer = 0; layer < config.layers; layer++) x = await m.block(layer, x);
  return m.head(await m.norm(x));
}
