/**
 * NativeSessionCache: a SessionCache whose graphs run through this package's
 * addon (the ONNX Runtime C API on the caller's arrays) after their first run.
 *
 * onnxruntime-node allocates every output itself, then copies it into a fresh,
 * zero-filled ArrayBuffer: two passes over each output's memory per op. Here
 * the outputs are ArrayBuffers allocated without zero-filling
 * (Buffer.allocUnsafeSlow: ONNX Runtime writes every element of an output) and
 * ONNX Runtime writes into them. On one thread of the 2-core VM a
 * [2048, 256] x [256, 1024] linear layer took 7.7 ms against 9.6 ms.
 *
 * A graph's first run (per key and requested outputs) goes through
 * onnxruntime-node as before: it tells the outputs' names, dtypes and shapes.
 * Later runs with the same input dtypes and shapes run natively, on this
 * cache's settings (intra-op threads, arena, spinning; the addon's sessions
 * mirror onnxruntime-node's options). Anything else, a graph with inputs or
 * outputs other than float32 and int32, other input shapes under one key, a
 * SharedArrayBuffer input, or the CUDA provider, stays on onnxruntime-node.
 * Either way the results are ONNX Runtime's own kernels' on the same inputs.
 */
import { BufferPool, SessionCache, type RuntimeOptions } from "@ulysses/kernels";
import { Tensor } from "@ulysses/tensors";
import { FusedAttentionError } from "./errors.js";
import { loadNative, type NativeBinding, type NativeRuntime, type NativeSession } from "./native.js";

type NativeDType = "float32" | "int32";

interface OutputSpec {
  name: string;
  dtype: NativeDType;
  shape: readonly number[];
  bytes: number;
}

/** How a graph runs natively: its session, the inputs it was planned for, and its outputs. */
interface Plan {
  session: NativeSession;
  /** Input names in feed order, with the dtype and shape of each: a later feed must match them. */
  inputNames: readonly string[];
  inputs: readonly { dtype: string; shape: readonly number[] }[];
  outputs: readonly OutputSpec[];
  outputBytes: number;
}

const nativeDType = (dtype: string): dtype is NativeDType => dtype === "float32" || dtype === "int32";

/** Whether `feeds` are exactly the inputs `plan` was made for (names, dtypes, shapes). */
function fits(plan: Plan, feeds: Record<string, Tensor>): boolean {
  let count = 0;
  for (const _ in feeds) count++;
  if (count !== plan.inputNames.length) return false;
  return plan.inputNames.every((name, i) => {
    const t = feeds[name];
    const want = plan.inputs[i]!;
    return t !== undefined && t.dtype === want.dtype && t.shape.length === want.shape.length && t.shape.every((d, j) => d === want.shape[j]);
  });
}

/** Default of NativeSessionCacheOptions.outputPoolBytes with memoryArena. */
export const OUTPUT_POOL_BYTES = 64 * 1024 * 1024;

export interface NativeSessionCacheOptions extends RuntimeOptions {
  /**
   * Bytes of given-back outputs (FusedOps.release) kept for the next outputs
   * of the same size (default OUTPUT_POOL_BYTES with memoryArena, which keeps
   * freed memory anyway; 0 without, where the collector frees it).
   */
  outputPoolBytes?: number;
  /** Fill given-back outputs with NaN, so that a read after release shows (tests). */
  poisonReleased?: boolean;
}

export class NativeSessionCache extends SessionCache {
  /** Outputs given back by their users, handed out again by this cache's runs and by FusedOps on it. */
  readonly outputs: BufferPool;
  private readonly binding: NativeBinding;
  private readonly runtime: NativeRuntime;
  /** Per key and requested outputs, once its first run started: the plan, or null (the graph stays on onnxruntime-node). */
  private readonly plans = new Map<string, Promise<Plan | null>>();
  /** onnxruntime-node runs in flight per key. */
  private readonly inFlight = new Map<string, number>();
  /** Runs that went through the addon, for diagnostics and tests. */
  nativeRuns = 0;

  constructor(options: NativeSessionCacheOptions = {}) {
    super(options);
    this.outputs = new BufferPool({
      maxBytes: options.outputPoolBytes ?? (this.memoryArena ? OUTPUT_POOL_BYTES : 0),
      poison: options.poisonReleased ?? false,
    });
    const native = loadNative();
    if (!native.ok) throw native.error;
    this.binding = native.binding;
    this.runtime = new native.binding.Runtime({
      threads: 1,
      graphThreads: this.intraOpThreads,
      memoryArena: this.memoryArena,
      allowSpinning: this.allowSpinning,
    });
  }

  override async run(key: string, build: () => Uint8Array, feeds: Record<string, Tensor>, outputs?: readonly string[]): Promise<Record<string, Tensor>> {
    if (this.executionProvider !== "cpu") return super.run(key, build, feeds, outputs);
    const planKey = outputs === undefined ? key : `${key}\n${outputs.join("\n")}`;
    const planned = this.plans.get(planKey);
    if (planned === undefined) {
      const first = this.runOnNode(key, build, feeds, outputs);
      const plan = first.then(async (result) => {
        const made = this.plan(build, feeds, result);
        // the graph now runs natively: onnxruntime-node's session (and its arena) goes, unless a run of it is in flight
        if (made !== null && !this.inFlight.has(key)) await this.releaseSession(key);
        return made;
      });
      this.plans.set(planKey, plan);
      // A plan that failed to be made (the addon could not create the session) fails the next call with its error; a failed
      // first run is forgotten, so the next call runs first again.
      plan.catch(() => undefined);
      first.catch(() => {
        if (this.plans.get(planKey) === plan) this.plans.delete(planKey);
      });
      return first;
    }
    const plan = await planned;
    if (plan === null || !fits(plan, feeds)) return this.runOnNode(key, build, feeds, outputs);
    return this.runNative(key, plan, feeds);
  }

  /** A run through onnxruntime-node (SessionCache.run), counted in flight per key. */
  private async runOnNode(key: string, build: () => Uint8Array, feeds: Record<string, Tensor>, outputs?: readonly string[]): Promise<Record<string, Tensor>> {
    this.inFlight.set(key, (this.inFlight.get(key) ?? 0) + 1);
    try {
      return await super.run(key, build, feeds, outputs);
    } finally {
      const left = this.inFlight.get(key)! - 1;
      if (left === 0) this.inFlight.delete(key);
      else this.inFlight.set(key, left);
    }
  }

  /** The plan for a graph whose first run gave `result`, or null when it must stay on onnxruntime-node. */
  private plan(build: () => Uint8Array, feeds: Record<string, Tensor>, result: Record<string, Tensor>): Plan | null {
    const inputNames = Object.keys(feeds);
    if (inputNames.some((n) => !nativeDType(feeds[n]!.dtype) || feeds[n]!.isShared)) return null;
    const specs: OutputSpec[] = [];
    for (const [name, t] of Object.entries(result)) {
      if (!nativeDType(t.dtype)) return null;
      specs.push({ name, dtype: t.dtype, shape: [...t.shape], bytes: t.data.byteLength });
    }
    return {
      session: new this.binding.Session(this.runtime, build()),
      inputNames,
      inputs: inputNames.map((name) => ({ dtype: feeds[name]!.dtype, shape: [...feeds[name]!.shape] })),
      outputs: specs,
      outputBytes: specs.reduce((n, s) => n + s.bytes, 0),
    };
  }

  private async runNative(key: string, plan: Plan, feeds: Record<string, Tensor>): Promise<Record<string, Tensor>> {
    this.collector?.willAllocate(plan.outputBytes);
    const arrays = plan.outputs.map((s) => this.outputs.take(s.dtype, s.bytes / 4));
    try {
      plan.session.runSync(
        plan.inputNames,
        plan.inputNames.map((n) => feeds[n]!.data as Float32Array | Int32Array),
        plan.inputNames.map((n) => feeds[n]!.shape),
        plan.outputs.map((s) => s.name),
        arrays,
        plan.outputs.map((s) => s.shape),
      );
    } catch (cause) {
      throw new FusedAttentionError(`running '${key}' natively failed (${SessionCache.describeFeeds(feeds)}): ${(cause as Error).message ?? cause}`, {
        cause,
      });
    }
    this.nativeRuns++;
    this.collector?.allocated(plan.outputBytes, true);
    const out: Record<string, Tensor> = {};
    plan.outputs.forEach((s, i) => {
      out[s.name] = new Tensor(s.dtype, s.shape, arrays[i] as never);
    });
    return out;
  }

  override async release(): Promise<void> {
    const plans = await Promise.allSettled(this.plans.values());
    this.plans.clear();
    for (const p of plans) if (p.status === "fulfilled") p.value?.session.release();
    this.runtime.release();
    this.outputs.clear();
    await super.release();
  }
}

/**
 * A NativeSessionCache for @ulysses/measure's measureMatmulRate (its `cache`
 * option): ONNX Runtime's MatMul kernel on the caller's arrays, each output
 * given back for the next run, so the rate is the kernel's alone, without
 * onnxruntime-node's per-run output allocation and copy or the page faults
 * of fresh buffers. Arenas on: the rate is the machine's, not a run's
 * allocation setting's.
 */
export function nativeRateCache(settings: RuntimeOptions): { cache: NativeSessionCache; recycle: (output: Tensor) => void } {
  const cache = new NativeSessionCache({ ...settings, memoryArena: true });
  return { cache, recycle: (output) => cache.outputs.give(output.data as Float32Array | Int32Array) };
}
