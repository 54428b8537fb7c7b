/**
 * FusedAttention: @ulysses/kernels' LocalAttention contract (its types and
 * its shape check, `attentionDims`) on our fused ONNX Runtime custom ops,
 * registered there as "fused" (`register.ts`). Each instance owns a native runtime
 * (session options with the "ulysses" op domain, its kernels running on
 * `threads` threads) and one session per (graph, causal, scale, documents),
 * created on first use: calls with `options.documents` run the graphs'
 * document variant, which passes the ids as two extra int32 inputs. Runs take the tensors' memory as is (no copies) and happen off
 * the JS thread, on libuv's pool, unless `options.onCallerThread` says the caller has nothing to progress meanwhile: then on the
 * calling thread, which saves the hand-off (2-7% of a training step on a 2-core VM, SP 1 and 2, N = 4096), for calls of at most
 * `callerThreadMaxPairs` query-key pairs (longer ones would hold up the thread's signals and timers). The kernels
 * themselves live in native/src/cpu (and cuda).
 */
import { availableParallelism } from "node:os";
import {
  assertCudaAvailable,
  attentionDims,
  checkBackwardShapes,
  type AttentionDims,
  type AttentionForwardResult,
  type AttentionGradients,
  type AttentionOptions,
  type LocalAttention,
} from "@ulysses/kernels";
import { Tensor } from "@ulysses/tensors";
import { FusedAttentionError } from "./errors.js";
import { DOCUMENT_INPUTS, GRAPH_IO, attentionModel, type GraphKind } from "./model.js";
import { loadNative, type NativeBinding, type NativeInfo, type NativeRuntime, type NativeSession } from "./native.js";

export type CpuIsa = "auto" | "avx512" | "avx2" | "portable";

export interface FusedAttentionOptions {
  /** Threads of the CPU kernel (default: os.availableParallelism()). */
  threads?: number;
  /**
   * The CPU kernels' instruction set (default "auto": the best this
   * processor has). For tests and benchmarks; an unsupported one throws.
   */
  isa?: CpuIsa;
  /**
   * "cuda" adds ONNX Runtime's CUDA execution provider, which runs the ops'
   * CUDA kernels (device 0; inputs and outputs stay in host memory and ONNX
   * Runtime copies them). Needs an addon built with nvcc and onnxruntime-node's
   * CUDA binaries. Untested so far: no GPU was available. Default "cpu".
   */
  executionProvider?: "cpu" | "cuda";
  /**
   * Told the bytes of every output tensor this attention allocates (the
   * SessionCache's GarbageCollector, so that freed attention outputs are
   * collected on the same schedule as the other ops'). Default: none.
   */
  collector?: { allocated(bytes: number): void } | null;
  /**
   * The most query-key pairs (batch x heads x seqQ x seqK, halved when
   * causal) a call with `onCallerThread` runs on the calling thread; a larger
   * one runs on libuv's pool anyway (default CALLER_THREAD_MAX_PAIRS).
   */
  callerThreadMaxPairs?: number;
}

/**
 * Default of FusedAttentionOptions.callerThreadMaxPairs: 2^30 pairs, about
 * a second of the backward on 2 threads of this project's 2-core VM (N =
 * 16384, 8 heads, causal). A call on the calling thread blocks it, and with
 * it the signals and timers of that thread (the trainer's second Ctrl-C on a
 * rank that runs on the main thread); what it saves, the hand-off to the
 * pool and back, is the same for any size, so past this it is not worth it.
 */
export const CALLER_THREAD_MAX_PAIRS = 2 ** 30;

/** What the loaded addon reports, or why it is unavailable. */
export function fusedAttentionStatus(): { available: true; info: NativeInfo; path: string } | { available: false; reason: string } {
  const native = loadNative();
  return native.ok ? { available: true, info: native.info, path: native.path } : { available: false, reason: native.error.message };
}

/** Shape errors from kernels' check, as this package's error class. */
const fusedError = (message: string): FusedAttentionError => new FusedAttentionError(message);

export class FusedAttention implements LocalAttention {
  readonly name = "fused";
  readonly threads: number;
  private readonly binding: NativeBinding;
  private runtime: NativeRuntime | undefined;
  private readonly sessions = new Map<string, NativeSession>();
  private readonly collector: { allocated(bytes: number): void } | null;
  private readonly callerThreadMaxPairs: number;

  /** Throws FusedAttentionError (saying how to build it) when the addon is not built or fails to load. */
  constructor(options: FusedAttentionOptions = {}) {
    const threads = options.threads ?? availableParallelism();
    if (!Number.isInteger(threads) || threads < 1) throw new FusedAttentionError(`FusedAttention: threads must be an integer >= 1, got ${threads}`);
    const native = loadNative();
    if (!native.ok) throw native.error;
    const cuda = options.executionProvider === "cuda";
    if (cuda && !native.info.cudaCompiled) {
      throw new FusedAttentionError(
        "FusedAttention: executionProvider 'cuda' needs the addon built with nvcc (none was found when it was built); rebuild with nvcc on PATH",
      );
    }
    if (cuda) {
      // Asked for without onnxruntime-node's CUDA binaries, ONNX Runtime would try to load its provider library and log an error line
      // to stderr before failing: say why here instead, and never ask ONNX Runtime for a provider that is not installed.
      try {
        assertCudaAvailable();
      } catch (error) {
        throw new FusedAttentionError(`FusedAttention: executionProvider 'cuda': ${(error as Error).message}`, { cause: error });
      }
    }
    this.threads = threads;
    this.collector = options.collector ?? null;
    const maxPairs = options.callerThreadMaxPairs ?? CALLER_THREAD_MAX_PAIRS;
    if (!(maxPairs >= 0)) throw new FusedAttentionError(`FusedAttention: callerThreadMaxPairs must be a number >= 0, got ${String(maxPairs)}`);
    this.callerThreadMaxPairs = maxPairs;
    this.binding = native.binding;
    try {
      this.runtime = new native.binding.Runtime({ threads, isa: options.isa ?? "auto", cuda });
    } catch (error) {
      throw new FusedAttentionError(`FusedAttention: ${(error as Error).message}`, { cause: error });
    }
  }

  async forward(q: Tensor<"float32">, k: Tensor<"float32">, v: Tensor<"float32">, options: AttentionOptions): Promise<AttentionForwardResult> {
    const s = attentionDims(q, k, v, options, "FusedAttention.forward", fusedError);
    const out = new Tensor("float32", q.shape);
    const logSumExp = new Tensor("float32", [s.batch, s.heads, s.seqQ]);
    await this.run("forward", s, options, [q, k, v], [out, logSumExp]);
    return { out, logSumExp };
  }

  async backward(
    q: Tensor<"float32">,
    k: Tensor<"float32">,
    v: Tensor<"float32">,
    out: Tensor<"float32">,
    dOut: Tensor<"float32">,
    logSumExp: Tensor<"float32">,
    options: AttentionOptions,
  ): Promise<AttentionGradients> {
    const s = attentionDims(q, k, v, options, "FusedAttention.backward", fusedError);
    checkBackwardShapes(s, out, dOut, logSumExp, q, "FusedAttention.backward", fusedError);
    const dq = new Tensor("float32", q.shape);
    const dk = new Tensor("float32", k.shape);
    const dv = new Tensor("float32", v.shape);
    await this.run("backward", s, options, [q, k, v, out, dOut, logSumExp], [dq, dk, dv]);
    return { dq, dk, dv };
  }

  /**
   * LocalAttention.release: frees the sessions and the native runtime; runs
   * in flight finish first. Idempotent; later calls reject with "used after
   * release()".
   */
  release(): void {
    for (const session of this.sessions.values()) session.release();
    this.sessions.clear();
    this.runtime?.release();
    this.runtime = undefined;
  }

  private session(kind: GraphKind, causal: boolean, scale: number, documents: boolean): NativeSession {
    const key = `${kind}:${causal}:${scale}:${documents}`;
    let session = this.sessions.get(key);
    if (!session) {
      if (!this.runtime) throw new FusedAttentionError("FusedAttention: used after release()");
      session = new this.binding.Session(this.runtime, attentionModel(kind, causal, scale, documents));
      this.sessions.set(key, session);
    }
    return session;
  }

  private async run(kind: GraphKind, s: AttentionDims, options: AttentionOptions, inputs: Tensor<"float32">[], outputs: Tensor<"float32">[]): Promise<void> {
    const io = GRAPH_IO[kind];
    const documents = options.documents;
    // The op's attribute is a float32: key sessions by the value it will hold.
    const session = this.session(kind, s.causal, Math.fround(s.scale), documents !== undefined);
    this.collector?.allocated(outputs.reduce((n, t) => n + t.data.byteLength, 0));
    const names: readonly string[] = documents ? [...io.inputs, ...DOCUMENT_INPUTS] : io.inputs;
    const data: (Float32Array | Int32Array)[] = inputs.map((t) => t.data);
    const dims: (readonly number[])[] = inputs.map((t) => t.shape);
    if (documents) {
      data.push(documents.query, documents.key);
      dims.push([s.batch, s.seqQ], [s.batch, s.seqK]);
    }
    const args = [names, data, dims, io.outputs, outputs.map((t) => t.data), outputs.map((t) => t.shape)] as const;
    try {
      const pairs = (s.batch * s.heads * s.seqQ * s.seqK) / (s.causal ? 2 : 1);
      if (options.onCallerThread === true && pairs <= this.callerThreadMaxPairs) session.runSync(...args);
      else await session.run(...args);
    } catch (error) {
      throw new FusedAttentionError(
        `FusedAttention.${kind} (causal ${s.causal}, scale ${s.scale}${documents ? ", documents" : ""}) failed: ${(error as Error).message}`,
        { cause: error },
      );
    }
  }
}
