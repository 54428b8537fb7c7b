/**
 * The tiled MLP (`mlpTileRows`) and activation checkpointing against the
 * plain block (which reference-block.test.ts holds to a float64 composition):
 * the same outputs and gradients for every MLP, norm, bias, tile size and
 * checkpointing; what each mode saves (`savedBytes`, by hand); what backward
 * recomputes; and that no [rows, mlpHidden] tensor spans more than one tile.
 */
import { ReferenceAttention, ReferenceOps } from "@ulysses/kernels";
import { randomTensor, seededRandom } from "@ulysses/kernels/testing";
import type { Tensor } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { resolveBlockConfig, type BlockConfig, type ResolvedBlockConfig } from "./block-config.js";
import { initBlockWeights, type BlockWeights } from "./block-weights.js";
import { BlockError } from "./errors.js";
import { expectSameStep } from "./testing-fixtures/same-step.js";
import { TransformerBlock, type TransformerBlockOptions } from "./transformer-block.js";

type F32 = Tensor<"float32">;

const [batch, seq] = [2, 5];
const rows = batch * seq; // 10: tiles of 3 and 7 leave a short last tile

function inputs(c: ResolvedBlockConfig, seed: number): { x: F32; dy: F32 } {
  const random = seededRandom(seed);
  return { x: randomTensor([batch, seq, c.hidden], random), dy: randomTensor([batch, seq, c.hidden], random) };
}

function block(config: BlockConfig, weights: BlockWeights, options: Partial<TransformerBlockOptions> = {}): TransformerBlock {
  return new TransformerBlock(config, { ops: new ReferenceOps(), localAttention: new ReferenceAttention(), weights, ...options });
}

async function step(b: TransformerBlock, x: F32, dy: F32) {
  const { y, context } = await b.forward(x);
  const savedBytes = context.savedBytes;
  const g = await b.backward(context, dy);
  return { y, dx: g.dx, grads: g.grads, savedBytes, after: context.savedBytes };
}

const kinds: { mlp: "gelu" | "swiglu"; norm: "layernorm" | "rmsnorm"; bias: boolean }[] = [];
for (const mlp of ["gelu", "swiglu"] as const)
  for (const norm of ["layernorm", "rmsnorm"] as const) for (const bias of [false, true]) kinds.push({ mlp, norm, bias });

describe("tiled MLP and checkpointing equal the plain block", () => {
  for (const kind of kinds) {
    // GQA, and mlpHidden = 48 unlike any other width
    const config: BlockConfig = { hidden: 16, heads: 4, kvHeads: 2, mlpRatio: 3, ...kind };
    const c = resolveBlockConfig(config);
    const weights = initBlockWeights(c, 3, { perturb: 0.2, std: 0.4 });
    const { x, dy } = inputs(c, 7);
    for (const checkpoint of [false, true]) {
      for (const tile of [0, 1, 3, 7, rows, 64]) {
        if (tile === 0 && !checkpoint) continue;
        it(`${kind.mlp}, ${kind.norm}, bias ${kind.bias}: mlpTileRows ${tile}${checkpoint ? ", checkpoint" : ""}`, async () => {
          const want = await step(block(config, weights), x, dy);
          const got = await step(block(config, weights, { mlpTileRows: tile, checkpoint }), x, dy);
          expectSameStep(c, got, want);
        });
      }
    }
  }
});

describe("mlpTileRows validation", () => {
  const config: BlockConfig = { hidden: 8, heads: 2 };
  it.each([0.5, -1, Number.NaN, Number.POSITIVE_INFINITY, "4" as unknown as number])("mlpTileRows %s throws a BlockError naming it", (bad) => {
    const make = () => block(config, initBlockWeights(resolveBlockConfig(config), 1), { mlpTileRows: bad });
    expect(make).toThrow(BlockError);
    expect(make).toThrow(`mlpTileRows must be 0 (off) or a positive integer (rows of [b * s, hidden] per MLP tile), got ${String(bad)}`);
  });

  it("0 and undefined are off; a positive integer is kept", () => {
    const weights = initBlockWeights(resolveBlockConfig(config), 1);
    expect(block(config, weights).mlpTileRows).toBe(0);
    expect(block(config, weights, { mlpTileRows: 0 }).mlpTileRows).toBe(0);
    expect(block(config, weights, { mlpTileRows: 4 }).mlpTileRows).toBe(4);
  });
});

/** Floats a context saves, by hand: rows = b * s, local attention. */
function savedFloats(c: ResolvedBlockConfig, mode: { tiled: boolean; checkpoint: boolean }): number {
  if (mode.checkpoint) return rows * c.hidden; // x only, tiled or not
  const stats = c.norm === "layernorm" ? 2 : 1; // mean and rstd, or rstd, [rows] per norm
  const kv = c.kvHeads * c.headDim;
  const q = c.heads * c.headDim;
  // the attention's context (its own count): q and out [rows, H*D], k and v [rows, Hkv*D], log-sum-exp [b, H, s]
  const attention = 2 * rows * q + 2 * rows * kv + rows * c.heads;
  // x, h1 (the input of q, k and v), x2 [rows, hidden], the attention output (attn.o's input, the context's out too) [rows, H*D];
  // norm1's stats; qkNorm: the per-head norms' inputs (q's and k's projections) and their rstd, one per head and row
  const qkNorm = c.qkNorm ? rows * (q + kv + c.heads + c.kvHeads) : 0;
  const first = 3 * rows * c.hidden + rows * q + stats * rows + qkNorm;
  // tiled: x2 is all the MLP keeps (no h2, norm2 stats, up, gate or activation)
  if (mode.tiled) return first + attention;
  // h2, norm2's stats; GELU: up's output and the activation; SwiGLU: gate, up and the activation [rows, mlpHidden]
  const mlp = rows * c.hidden + stats * rows + (c.mlp === "swiglu" ? 3 : 2) * rows * c.mlpHidden;
  return first + mlp + attention;
}

describe("BlockContext.savedBytes", () => {
  const configs: BlockConfig[] = [
    { hidden: 8, heads: 2, mlpRatio: 2, bias: true },
    { hidden: 16, heads: 4, kvHeads: 2, norm: "rmsnorm", mlp: "swiglu", mlpRatio: 3 },
    // Qwen3-shaped: a head width of 6 (hidden / heads = 3), per-head q/k norms, q/k/v biases
    { hidden: 12, heads: 4, kvHeads: 2, headDim: 6, qkNorm: true, attentionBias: "qkv", norm: "rmsnorm", mlp: "swiglu", mlpRatio: 2 },
  ];
  for (const config of configs) {
    for (const tiled of [false, true]) {
      for (const checkpoint of [false, true]) {
        it(`${JSON.stringify(config)}${tiled ? ", tiled" : ""}${checkpoint ? ", checkpoint" : ""}: the hand count; only x once backward ran`, async () => {
          const c = resolveBlockConfig(config);
          const { x, dy } = inputs(c, 2);
          const b = block(config, initBlockWeights(c, 5), { mlpTileRows: tiled ? 3 : 0, checkpoint });
          const { context } = await b.forward(x);
          expect(context.savedBytes).toBe(4 * savedFloats(c, { tiled, checkpoint }));
          await b.backward(context, dy);
          // backward took every saved tensor out of the context
          expect(context.savedBytes).toBe(x.byteLength);
          if (!checkpoint) await expect(b.backward(context, dy)).rejects.toThrow(/released/);
        });
      }
    }
  }

  it("release() drops what was saved, and backward refuses the context", async () => {
    const config: BlockConfig = { hidden: 8, heads: 2, mlpRatio: 2 };
    const c = resolveBlockConfig(config);
    const { x, dy } = inputs(c, 3);
    const b = block(config, initBlockWeights(c, 5), { mlpTileRows: 4 });
    const { context } = await b.forward(x);
    b.release(context);
    expect(context.savedBytes).toBe(x.byteLength);
    await expect(b.backward(context, dy)).rejects.toThrow(BlockError);
  });
});

/** ReferenceOps that log the linear layers they run and the widest [rows, mlpHidden] tensor any op reads or makes. */
class WatchedOps extends ReferenceOps {
  linears: string[] = [];
  norms = 0;
  /** Most rows of a [rows, mlpHidden] tensor seen. */
  wideRows = 0;

  constructor(
    private readonly weights: BlockWeights,
    private readonly mlpHidden: number,
  ) {
    super();
  }

  reset(): void {
    this.linears = [];
    this.norms = 0;
    this.wideRows = 0;
  }

  private see(...tensors: (F32 | undefined)[]): void {
    for (const t of tensors) if (t !== undefined && t.rank === 2 && t.shape[1] === this.mlpHidden) this.wideRows = Math.max(this.wideRows, t.shape[0]!);
  }

  private nameOf(w: F32): string {
    return Object.entries(this.weights)
      .find(([, t]) => t === w)![0]
      .replace(/\.w$/, "");
  }

  override async linearForward(x: F32, w: F32, b?: F32): Promise<F32> {
    this.linears.push(this.nameOf(w));
    const y = await super.linearForward(x, w, b);
    this.see(x, y);
    return y;
  }

  override async linearBackward(x: F32, w: F32, dy: F32, withBias: boolean) {
    const r = await super.linearBackward(x, w, dy, withBias);
    this.see(x, dy, r.dx);
    return r;
  }

  override async layerNormForward(x: F32, gamma: F32, beta: F32, eps: number) {
    this.norms++;
    return super.layerNormForward(x, gamma, beta, eps);
  }

  override async rmsNormForward(x: F32, gamma: F32, eps: number) {
    this.norms++;
    return super.rmsNormForward(x, gamma, eps);
  }

  override async geluForward(x: F32): Promise<F32> {
    const y = await super.geluForward(x);
    this.see(x, y);
    return y;
  }

  override async geluBackward(x: F32, dy: F32): Promise<F32> {
    const dx = await super.geluBackward(x, dy);
    this.see(x, dy, dx);
    return dx;
  }

  override async swigluForward(gate: F32, up: F32): Promise<F32> {
    const y = await super.swigluForward(gate, up);
    this.see(gate, up, y);
    return y;
  }

  override async swigluBackward(gate: F32, up: F32, dy: F32) {
    const r = await super.swigluBackward(gate, up, dy);
    this.see(gate, up, dy, r.dGate, r.dUp);
    return r;
  }
}

describe("what forward runs and backward recomputes", () => {
  const attentionLinears = ["attn.q", "attn.k", "attn.v", "attn.o"];
  for (const mlp of ["gelu", "swiglu"] as const) {
    const config: BlockConfig = { hidden: 16, heads: 4, kvHeads: 2, mlpRatio: 3, mlp };
    const c = resolveBlockConfig(config);
    const up = mlp === "swiglu" ? ["mlp.gate", "mlp.up"] : ["mlp.up"];
    const tiles = 4; // 10 rows in tiles of 3
    const repeat = (names: string[], n: number) => Array.from({ length: n }, () => names).flat();
    const cases = [
      { tile: 0, checkpoint: false, forward: [...attentionLinears, ...up, "mlp.down"], recompute: [], norms: 0, wide: rows },
      // the recompute stops at the activation: no mlp.down (nor the residual after it)
      { tile: 0, checkpoint: true, forward: [...attentionLinears, ...up, "mlp.down"], recompute: [...attentionLinears, ...up], norms: 2, wide: rows },
      {
        tile: 3,
        checkpoint: false,
        forward: [...attentionLinears, ...repeat([...up, "mlp.down"], tiles)],
        recompute: repeat(up, tiles),
        norms: tiles,
        wide: 3,
      },
      // the recompute stops at x2; the tiles recompute norm2, up (gate) and the activation
      {
        tile: 3,
        checkpoint: true,
        forward: [...attentionLinears, ...repeat([...up, "mlp.down"], tiles)],
        recompute: [...attentionLinears, ...repeat(up, tiles)],
        norms: 1 + tiles,
        wide: 3,
      },
    ];
    for (const t of cases) {
      it(`${mlp}, mlpTileRows ${t.tile}${t.checkpoint ? ", checkpoint" : ""}: backward recomputes ${t.recompute.length} linears; [rows, mlpHidden] tensors span ${t.wide} rows`, async () => {
        const weights = initBlockWeights(c, 4, { perturb: 0.2, std: 0.4 });
        const ops = new WatchedOps(weights, c.mlpHidden);
        const b = new TransformerBlock(config, { ops, localAttention: new ReferenceAttention(), weights, mlpTileRows: t.tile, checkpoint: t.checkpoint });
        const { x, dy } = inputs(c, 9);
        const { context } = await b.forward(x);
        expect(ops.linears).toEqual(t.forward);
        expect(ops.wideRows).toBe(t.wide);
        ops.reset();
        await b.backward(context, dy);
        expect(ops.linears).toEqual(t.recompute);
        expect(ops.norms).toBe(t.norms);
        expect(ops.wideRows).toBe(t.wide);
      });
    }
  }
});
