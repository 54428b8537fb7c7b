/**
 * The GPT's forward pass, written once over an abstract `GptMath<T>`:
 * training runs it on tensors (`gpt.ts`), ONNX export on graph values
 * (`export-onnx.ts`). Each layer is the block's own definition
 * (`blockForward` of @ulysses/block), rows = b * s:
 *
 *   x = embed(ids)            [rows, hidden]
 *   x = block_l(x)            for l = 0 .. layers - 1
 *   h = norm(x)               [rows, hidden] (`gptHidden` stops here)
 *   logits = head(h)          [rows, vocab] (head: the embedding, transposed, when tied)
 *
 * Training with a tiled loss (`lossTileRows` of @ulysses/training) runs
 * `gptHidden` and applies the head a tile of rows at a time, so the full
 * [rows, vocab] logits never exist.
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

/** The forward up to the final norm: the LM head's input h [rows, hidden]. */
export async function gptHidden<T>(config: GptConfig, m: Omit<GptMath<T>, "head">): Promise<T> {
  let x = await m.embed();
  for (let layer = 0; layer < config.layers; layer++) x = await m.block(layer, x);
  return m.norm(x);
}

/** The whole forward: logits [rows, vocab]. */
export async function gptForward<T>(config: GptConfig, m: GptMath<T>): Promise<T> {
  return m.head(await gptHidden(config, m));
}
