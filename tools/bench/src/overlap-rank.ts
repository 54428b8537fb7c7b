/**
 * One rank of `pnpm bench:overlap` (a threads-backend worker started by
 * `launch`): ring attention alone (no block around it), forward + backward
 * on this rank's zigzag shard, alternating a RingAttention that posts each
 * transfer before the block computes with one that awaits it first
 * (`overlap: false`), so other work on the machine slows both alike. Returns
 * per iteration each one's wall time and its RingAttention.stats.
 */
import type { ProcessGroup } from "@ulysses/collectives";
import { FusedAttention } from "@ulysses/native-ops";
import { OrtAttention, SessionCache, type LocalAttention } from "@ulysses/kernels";
import { gatherRuns, PipelinedUlyssesAttention, RingAttention, shardRuns, UlyssesAttention, type ShardedAttention } from "@ulysses/parallel";
import { randomUniform, Tensor } from "@ulysses/tensors";

export interface ProbeArgs {
  seq: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  iters: number;
  warmups: number;
}

export interface UlyssesProbeArgs extends ProbeArgs {
  headGroups: number;
}

export interface UlyssesProbeTimes {
  /** ms per iteration: [plain Ulysses, pipelined]. */
  stepMs: [number[], number[]];
  /** ms inside the local kernel per iteration: [plain, pipelined]. */
  kernelMs: [number[], number[]];
}

export interface ProbeTimes {
  /** ms per iteration: [overlap, no overlap]. */
  stepMs: [number[], number[]];
  computeMs: [number[], number[]];
  waitMs: [number[], number[]];
}

interface RankContext {
  group: ProcessGroup;
  ortThreads: number;
  args?: { kernel?: "fused" | "ort" };
}

export default function setup(ctx: RankContext) {
  const { group } = ctx;
  const cache = new SessionCache({ intraOpThreads: ctx.ortThreads });
  const local: LocalAttention = (ctx.args?.kernel ?? "fused") === "fused" ? new FusedAttention({ threads: ctx.ortThreads }) : new OrtAttention({ cache });
  return {
    async probe(a: ProbeArgs): Promise<ProbeTimes> {
      const runs = shardRuns(a.seq, group.size, "zigzag");
      const mine = runs[group.rank]!;
      // the whole sequence's q, k, v, dOut (same seed on every rank), then this rank's zigzag runs of them
      const whole = (heads: number, seed: number) => randomUniform([1, a.seq, heads, a.headDim], { seed, low: -1, high: 1 }) as Tensor<"float32">;
      const shard = (t: Tensor<"float32">) => {
        const s = mine.reduce((n, r) => n + r.length, 0);
        return new Tensor(
          "float32",
          [1, s, t.shape[2]!, a.headDim],
          gatherRuns(t.data, 1, a.seq * t.shape[2]! * a.headDim, scaled(mine, t.shape[2]! * a.headDim)),
        );
      };
      const [q, k, v, dOut] = [whole(a.heads, 1), whole(a.kvHeads, 2), whole(a.kvHeads, 3), whole(a.heads, 4)].map(shard) as [
        Tensor<"float32">,
        Tensor<"float32">,
        Tensor<"float32">,
        Tensor<"float32">,
      ];
      const rings = [new RingAttention(local, group, { overlap: true }), new RingAttention(local, group, { overlap: false })] as const;
      const once = async (ring: RingAttention) => {
        await group.barrier();
        ring.resetStats();
        const t0 = performance.now();
        const { out, context } = await ring.forward(q, k, v, { causal: true, seqRuns: runs });
        const grads = await ring.backward(context, dOut);
        const ms = performance.now() - t0;
        ring.release(context, out, grads.dq, grads.dk, grads.dv);
        return { ms, ...ring.stats };
      };
      for (let w = 0; w < a.warmups; w++) for (const ring of rings) await once(ring);
      const times: ProbeTimes = { stepMs: [[], []], computeMs: [[], []], waitMs: [[], []] };
      for (let i = 0; i < a.iters; i++) {
        // alternate the order too, so neither always runs first after the barrier
        const order = i % 2 === 0 ? [0, 1] : [1, 0];
        for (const j of order) {
          const r = await once(rings[j]!);
          times.stepMs[j]!.push(r.ms);
          times.computeMs[j]!.push(r.computeMs);
          times.waitMs[j]!.push(r.waitMs);
        }
      }
      return times;
    },

    /** Plain UlyssesAttention against PipelinedUlyssesAttention, forward + backward on this rank's contiguous shard, alternating. */
    async probeUlysses(a: UlyssesProbeArgs): Promise<UlyssesProbeTimes> {
      const s = Math.floor(a.seq / group.size);
      const seqLength = s * group.size;
      const make = (heads: number, seed: number) =>
        randomUniform([1, s, heads, a.headDim], { seed: seed + 16 * group.rank, low: -1, high: 1 }) as Tensor<"float32">;
      const [q, k, v, dOut] = [make(a.heads, 1), make(a.kvHeads, 2), make(a.kvHeads, 3), make(a.heads, 4)] as const;
      let kernelMs = 0;
      const clocked = async <T>(call: () => Promise<T>): Promise<T> => {
        const t0 = performance.now();
        try {
          return await call();
        } finally {
          kernelMs += performance.now() - t0;
        }
      };
      const timed: LocalAttention = {
        name: local.name,
        forward: (...args) => clocked(() => local.forward(...args)),
        backward: (...args) => clocked(() => local.backward(...args)),
        release: () => undefined,
      };
      const wrappers: ShardedAttention[] = [new UlyssesAttention(timed, group), new PipelinedUlyssesAttention(timed, group, { chunks: a.headGroups })];
      const once = async (w: ShardedAttention) => {
        await group.barrier();
        kernelMs = 0;
        const t0 = performance.now();
        const { out, context } = await w.forward(q, k, v, { causal: true, seqLength });
        const grads = await w.backward(context, dOut);
        const ms = performance.now() - t0;
        w.release(context, out, grads.dq, grads.dk, grads.dv);
        return { ms, kernel: kernelMs };
      };
      for (let i = 0; i < a.warmups; i++) for (const w of wrappers) await once(w);
      const times: UlyssesProbeTimes = { stepMs: [[], []], kernelMs: [[], []] };
      for (let i = 0; i < a.iters; i++) {
        for (const j of i % 2 === 0 ? [0, 1] : [1, 0]) {
          const r = await once(wrappers[j]!);
          times.stepMs[j]!.push(r.ms);
          times.kernelMs[j]!.push(r.kernel);
        }
      }
      return times;
    },

    async dispose() {
      if (local instanceof FusedAttention) local.release();
      await cache.release();
    },
  };
}

/** Runs of token positions as runs of floats (each token `width` floats) in a [1, N * width] row. */
function scaled(runs: readonly { start: number; length: number }[], width: number) {
  return runs.map((r) => ({ start: r.start * width, length: r.length * width }));
}
