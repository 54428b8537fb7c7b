/**
 * Runs ONNX graphs with onnxruntime-node. Sessions are created once per key
 * (a graph's identity plus the shapes it was built for) and reused. Inputs and
 * outputs cross as @ulysses/tensors without copies. Execution provider and
 * intra-op thread count are chosen here; nothing else in the package touches
 * ONNX Runtime directly.
 */
import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import * as ort from "onnxruntime-node";
import type { Tensor } from "@ulysses/tensors";
import { fromOrt, toOrt } from "@ulysses/tensors/ort";
import { KernelError } from "../errors.js";
import { GarbageCollector } from "./garbage-collector.js";

export type ExecutionProvider = "cpu" | "cuda";

export interface RuntimeOptions {
  /** Execution provider; "cuda" fails loudly when onnxruntime-node has no CUDA binaries. */
  executionProvider?: ExecutionProvider;
  /** ONNX Runtime intra-op threads per session (default max(1, floor(cores / ranksInProcess))). */
  intraOpThreads?: number;
  /** Ranks sharing this process's cores (used for the default thread count). */
  ranksInProcess?: number;
  /**
   * Whether idle intra-op threads spin (default false; ONNX Runtime's own
   * default is true). Every session has its own thread pool, and a cache holds
   * one session per op and shape, run one after another: a pool still spinning
   * after its op takes the cores the next op's pool needs (the trainer at SP 1
   * with 2 threads, N = 4096, hidden 256, 2-core VM: 2000-2200 tokens/s
   * spinning, no faster than 1 thread; 4000-4750 without), and on
   * oversubscribed cores spinning stalls every parallel op (3-6x slower
   * attention with 2 threads on the shared 2-core machine). Pass true only to
   * time one session run in a loop on idle cores (measureMatmulRate does).
   */
  allowSpinning?: boolean;
  /**
   * Keep ONNX Runtime's CPU arena and memory-pattern planning in every session
   * (default false). Each session (one per op and shape) then keeps a pool of
   * the largest intermediates it produced: faster at short sequences (no
   * fresh allocations), about twice the peak memory at long ones
   * (docs/results/memory).
   */
  memoryArena?: boolean;
  /**
   * Run V8's full garbage collection after every this many bytes of op
   * outputs (default 0: never; V8 alone decides). Bounds the freed tensors
   * still held in memory to about this much per rank, so the peak is the live
   * tensors' (see GarbageCollector); the trainer sets 16 MiB with
   * --no-memory-arena.
   */
  collectGarbageEvery?: number;
}

process.env.ORT_DISABLE_TELEMETRY = "1";

export function defaultIntraOpThreads(ranksInProcess = 1): number {
  return Math.max(1, Math.floor(os.availableParallelism() / Math.max(1, ranksInProcess)));
}

export class SessionCache {
  readonly executionProvider: ExecutionProvider;
  readonly intraOpThreads: number;
  readonly allowSpinning: boolean;
  readonly memoryArena: boolean;
  /** Present with options.collectGarbageEvery > 0. */
  readonly collector: GarbageCollector | null;
  private readonly sessions = new Map<string, Promise<ort.InferenceSession>>();
  /** Bytes of each key's outputs at its last run (a key's graph has fixed shapes), for the collector's willAllocate. */
  private readonly outputBytes = new Map<string, number>();

  constructor(options: RuntimeOptions = {}) {
    this.executionProvider = options.executionProvider ?? "cpu";
    if (this.executionProvider !== "cpu" && this.executionProvider !== "cuda") {
      throw new KernelError(`unknown execution provider '${String(this.executionProvider)}'; use 'cpu' or 'cuda'`);
    }
    if (this.executionProvider === "cuda") assertCudaAvailable();
    this.intraOpThreads = options.intraOpThreads ?? defaultIntraOpThreads(options.ranksInProcess);
    this.allowSpinning = options.allowSpinning ?? false;
    this.memoryArena = options.memoryArena ?? false;
    const every = options.collectGarbageEvery ?? 0;
    this.collector = every === 0 ? null : new GarbageCollector(every);
    if (!Number.isInteger(this.intraOpThreads) || this.intraOpThreads < 1) {
      throw new KernelError(`intraOpThreads must be a positive integer, got ${options.intraOpThreads}`);
    }
  }

  /** Number of sessions created so far. */
  get size(): number {
    return this.sessions.size;
  }

  /**
   * The session for `key`, building its graph with `build` the first time.
   * Private: onnxruntime-node's types stay out of this package's public
   * declarations (onnxruntime-common's .d.ts need the DOM lib to type-check).
   */
  private session(key: string, build: () => Uint8Array): Promise<ort.InferenceSession> {
    let session = this.sessions.get(key);
    if (!session) {
      const bytes = build();
      session = ort.InferenceSession.create(bytes, {
        executionProviders: [this.executionProvider],
        intraOpNumThreads: this.intraOpThreads,
        interOpNumThreads: 1,
        executionMode: "sequential",
        graphOptimizationLevel: "all",
        // By default no per-session CPU arena or memory-pattern planning: each
        // session would keep its own pool of the largest intermediates it ever
        // produced (one session per op and shape), about 60 KiB per token of the
        // trainer's peak at hidden 256 (docs/results/memory); outputs are copied
        // to JS anyway.
        enableCpuMemArena: this.memoryArena,
        enableMemPattern: this.memoryArena,
        logSeverityLevel: 3,
        ...(this.allowSpinning ? {} : { extra: { session: { intra_op: { allow_spinning: "0" } } } }),
      }).catch((cause: unknown) => {
        this.sessions.delete(key);
        throw new KernelError(`ONNX Runtime could not create the session for '${key}': ${(cause as Error).message ?? cause}`, { cause });
      });
      this.sessions.set(key, session);
    }
    return session;
  }

  /** Runs the graph for `key` on `feeds`; returns the named outputs as tensors (no copies). */
  async run(key: string, build: () => Uint8Array, feeds: Record<string, Tensor>, outputs?: readonly string[]): Promise<Record<string, Tensor>> {
    const session = await this.session(key, build);
    const ortFeeds: Record<string, ort.Tensor> = {};
    for (const [name, t] of Object.entries(feeds)) ortFeeds[name] = toOrt(t) as ort.Tensor;
    const expected = this.outputBytes.get(key);
    if (expected !== undefined) this.collector?.willAllocate(expected);
    let result: ort.InferenceSession.ReturnType;
    try {
      result = outputs ? await session.run(ortFeeds, [...outputs]) : await session.run(ortFeeds);
    } catch (cause) {
      throw new KernelError(`running '${key}' failed (${SessionCache.describeFeeds(feeds)}): ${(cause as Error).message ?? cause}`, { cause });
    }
    const out: Record<string, Tensor> = {};
    let bytes = 0;
    for (const [name, value] of Object.entries(result)) {
      const t = fromOrt(value as never);
      out[name] = t;
      bytes += t.data.byteLength;
    }
    this.collector?.allocated(bytes, expected === bytes);
    if (this.collector) this.outputBytes.set(key, bytes);
    return out;
  }

  /** The feeds as an error names them: "name: tensor" each. */
  protected static describeFeeds(feeds: Record<string, Tensor>): string {
    return Object.entries(feeds)
      .map(([n, t]) => `${n}: ${t}`)
      .join(", ");
  }

  /**
   * Releases the session of `key`, if there is one (its next run creates it again); for a subclass that runs the graph by other
   * means once it knows its outputs (NativeSessionCache of @ulysses/native-ops). Only when no run of `key` is in flight.
   */
  protected async releaseSession(key: string): Promise<void> {
    const session = this.sessions.get(key);
    if (session === undefined) return;
    this.sessions.delete(key);
    await (await session).release();
  }

  /** Releases every session. */
  async release(): Promise<void> {
    const all = [...this.sessions.values()];
    this.sessions.clear();
    await Promise.allSettled(all.map(async (s) => (await s).release()));
  }
}

/** Throws a message that says how to install the CUDA binaries when they are missing. */
export function assertCudaAvailable(): void {
  const backends = (ort as unknown as { listSupportedBackends?: () => { name: string; bundled: boolean }[] }).listSupportedBackends?.() ?? [];
  // onnxruntime-node lists "cuda" with bundled: false; its provider library is
  // only present when the package's install step downloaded it.
  const require = createRequire(import.meta.url);
  const binDir = path.join(path.dirname(require.resolve("onnxruntime-node")), "..", "bin", "napi-v6", process.platform, process.arch);
  const present = fs.existsSync(path.join(binDir, "libonnxruntime_providers_cuda.so"));
  if (!present) {
    throw new KernelError(
      "the CUDA execution provider was requested but onnxruntime-node has no CUDA binaries here " +
        `(supported: ${backends.map((b) => b.name).join(", ") || "none"}). Its install step is disabled in this workspace; ` +
        "see README 'GPU (CUDA execution provider)': set allowBuilds onnxruntime-node: true in pnpm-workspace.yaml and reinstall on a machine with CUDA 12 and internet.",
    );
  }
}
