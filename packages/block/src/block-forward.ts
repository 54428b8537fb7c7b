/**
 * The transformer block's forward pass, written once over an abstract
 * `BlockMath<T>`: training runs it on tensors (recording what backward needs,
 * `transformer-block.ts`), ONNX export runs it on graph values
 * (@ulysses/model's export). Pre-norm, rows = b * s:
 *
 *   h1 = norm1(x); q, k, v = h1 @ Wq, Wk, Wv (+ biases);
 *   (qkNorm: q, k = RMSNorm over each head's D); RoPE(q, k)
 *   o  = attention(q, k, v)
 *   x2 = x + o @ Wo
 *   h2 = norm2(x2); m = MLP(h2)   (GELU: down(gelu(up h2)); SwiGLU: down(silu(gate h2) * up h2))
 *   y  = x2 + m
 *
 * `blockForward` is `attentionHalf` (x -> x2) then `mlpHalf` (x2 -> y, rows
 * independent): TransformerBlock's tiled MLP runs `mlpHalf` on row tiles, and
 * its checkpoint recompute stops at `mlpActivation` (or at x2).
 */
import type { ResolvedBlockConfig } from "./block-config.js";
import type { QkNormName } from "./block-weights.js";
import { mlpComponent } from "./mlps.js";

/** The block's linear layers (weights `${name}.w`, biases `${name}.b`). */
export type LinearName = "attn.q" | "attn.k" | "attn.v" | "attn.o" | "mlp.gate" | "mlp.up" | "mlp.down";
export type NormName = "norm1" | "norm2";

/** The operations the block is made of, over values of type T. */
export interface BlockMath<T> {
  /** x [rows, hidden] -> normalised [rows, hidden] (the config's norm, its eps, weights `${name}.gamma`/`.beta`). */
  norm(x: T, name: NormName): Promise<T>;
  /** x [rows, in] -> x @ W (+ b) [rows, out]. */
  linear(x: T, name: LinearName): Promise<T>;
  /** [rows, n * D] -> [b, s, n, D] */
  splitHeads(x: T, heads: number): T;
  /** [b, s, n, D] -> [rows, n * D] */
  mergeHeads(x: T): T;
  /** qkNorm: x [b, s, n, D] -> RMSNorm over D of every head (weights `${name}.gamma` [D], the config's eps). */
  headNorm(x: T, name: QkNormName): Promise<T>;
  /** Rotary embedding of q or k [b, s, n, D] at the positions of the input's tokens. */
  rope(x: T, which: "q" | "k"): Promise<T>;
  /** Causal attention: q [b, s, H, D], k, v [b, s, Hkv, D] -> [b, s, H, D]. */
  attention(q: T, k: T, v: T): Promise<T>;
  /** a + b; `a` is always a fresh result the implementation may overwrite. */
  residual(a: T, b: T): Promise<T>;
  /** The config's MLP activation (its component) of its projections' outputs, in the component's order. */
  mlpActivation(inputs: T[]): Promise<T>;
}

/** x [rows, hidden] -> y [rows, hidden]. */
export async function blockForward<T>(config: ResolvedBlockConfig, m: BlockMath<T>, x: T): Promise<T> {
  return mlpHalf(config, m, await attentionHalf(config, m, x));
}

/**
 * The block's first half, x [rows, hidden] -> x2 = x + attention(norm1(x)) @ Wo.
 * (`blockForward` is this then `mlpHalf`; the tiled MLP of TransformerBlock
 * runs `mlpHalf` on row tiles of x2.)
 */
export async function attentionHalf<T>(config: ResolvedBlockConfig, m: BlockMath<T>, x: T): Promise<T> {
  const h1 = await m.norm(x, "norm1");
  // [rows, n * D] -> [b, s, n, D], then (qkNorm) each head normalised, then rotated
  const heads = async (name: "attn.q" | "attn.k", n: number) => {
    const t = m.splitHeads(await m.linear(h1, name), n);
    return config.qkNorm ? m.headNorm(t, name === "attn.q" ? "attn.q_norm" : "attn.k_norm") : t;
  };
  const q = await m.rope(await heads("attn.q", config.heads), "q");
  const k = await m.rope(await heads("attn.k", config.kvHeads), "k");
  const v = m.splitHeads(await m.linear(h1, "attn.v"), config.kvHeads);
  const o = m.mergeHeads(await m.attention(q, k, v));
  return m.residual(await m.linear(o, "attn.o"), x);
}

/** The block's second half, x2 [rows, hidden] -> y = x2 + down(mlpActivation(x2)); rows are independent. */
export async function mlpHalf<T>(config: ResolvedBlockConfig, m: BlockMath<T>, x2: T): Promise<T> {
  return m.residual(await m.linear(await mlpActivation(config, m, x2), "mlp.down"), x2);
}

/** x2 [rows, hidden] -> the MLP's activation [rows, mlpHidden], the input of mlp.down (what backward recomputes). */
export async function mlpActivation<T>(config: ResolvedBlockConfig, m: BlockMath<T>, x2: T): Promise<T> {
  const h2 = await m.norm(x2, "norm2");
  const inputs: T[] = [];
  for (const projection of mlpComponent(config.mlp).projections) inputs.push(await m.linear(h2, projection));
  return m.mlpActivation(inputs);
}
