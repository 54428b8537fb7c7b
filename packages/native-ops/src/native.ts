/**
 * Loads the native addon (build/Release/ulysses_fused_attention.node) after
 * onnxruntime-node, so that the process holds one libonnxruntime.so.1 that
 * both use: onnxruntime-node's binding loads it; the addon finds it by soname
 * (dlopen RTLD_NOLOAD) and takes its C API. Loading never throws: the result
 * says why the addon is unavailable (not built, wrong runtime, ...) and
 * FusedAttention's constructor reports it. What the addon can do is in
 * native/src/addon.cc.
 */
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { FusedAttentionError } from "./errors.js";

export interface NativeInfo {
  /** Version of the ONNX Runtime library in this process (onnxruntime-node's). */
  ortVersion: string;
  /** The C API version the addon requested (its headers' version). */
  apiVersion: number;
  /** The CPU kernels' instruction set: "avx512", "avx2" or "portable". */
  cpuIsa: string;
  /** True when the addon was built with nvcc and holds the CUDA kernels. */
  cudaCompiled: boolean;
}

export interface NativeRuntime {
  release(): void;
}

/** A session run's arguments: the inputs' names, arrays and dims, then the outputs' (arrays the caller allocated). */
export type NativeRunArgs = [
  inputNames: readonly string[],
  inputs: readonly (Float32Array | Int32Array)[],
  inputDims: readonly (readonly number[])[],
  outputNames: readonly string[],
  outputs: readonly (Float32Array | Int32Array)[],
  outputDims: readonly (readonly number[])[],
];

export interface NativeSession {
  /** Runs off the JS thread, on libuv's pool. */
  run(...args: NativeRunArgs): Promise<void>;
  /** As run, on the calling thread; throws ONNX Runtime's error. */
  runSync(...args: NativeRunArgs): void;
  release(): void;
}

export interface NativeBinding {
  init(libraryPath: string): NativeInfo;
  /**
   * Process-wide memory named `name`: the first call maps `bytes` zeroed
   * bytes; a later call from any thread of the process with the same name
   * and size returns another ArrayBuffer (not a SharedArrayBuffer, so ONNX
   * Runtime takes it) over the same bytes. Unmapped when the last is
   * collected. Throws RangeError for another size under a taken name.
   */
  sharedMemory(name: string, bytes: number): ArrayBuffer;
  setMmapThreshold(bytes: number): boolean;
  setTrimThreshold(bytes: number): boolean;
  /**
   * y = gelu(x) (tanh approximation), synchronously on this thread. Throws
   * TypeError / RangeError for arrays that are not Float32Arrays of one
   * length, an output that partly overlaps an input, or an unknown isa.
   */
  geluForward(x: Float32Array, y: Float32Array, isa?: string): void;
  /** dx = dy * gelu'(x), as geluForward. */
  geluBackward(x: Float32Array, dy: Float32Array, dx: Float32Array, isa?: string): void;
  /**
   * One AdamW update in place (params, m, v) from grads, decayMask null or one byte per element (1: decay), in float64 per
   * element as @ulysses/training's AdamW.update: the same bits, on the loop built for `isa` (as geluForward's). Throws TypeError /
   * RangeError for arrays of other lengths or types, outputs overlapping inputs or each other, or a number that is not finite.
   */
  adamwUpdate(
    params: Float32Array,
    grads: Float32Array,
    m: Float32Array,
    v: Float32Array,
    decayMask: Uint8Array | null,
    beta1: number,
    beta2: number,
    eps: number,
    lr: number,
    decay: number,
    c1: number,
    c2: number,
    isa?: string,
  ): void;
  /** target += term elementwise in place (target may be term), float32 additions with the bits of JavaScript's; as geluForward. */
  addInto(term: Float32Array, target: Float32Array, isa?: string): void;
  /**
   * into [in, out] += x [rows, in]^T dy [rows, out] in place (row major),
   * synchronously on this thread and threads - 1 more (each owns a range of
   * columns). Throws TypeError / RangeError for arrays that are not
   * Float32Arrays of those sizes, into overlapping x or dy, or an unknown isa.
   */
  weightGradient(
    x: Float32Array,
    dy: Float32Array,
    into: Float32Array,
    rows: number,
    inFeatures: number,
    outFeatures: number,
    threads: number,
    isa?: string,
  ): void;
  /**
   * y [rows, out] = x [rows, in] w [in, out] (row major), synchronously on this thread and threads - 1 more (each owns a range
   * of columns), w read from memory once however deep the product (the tied LM head's dLogits E). Throws TypeError /
   * RangeError for arrays that are not Float32Arrays of those sizes, y overlapping x or w, or an unknown isa.
   */
  matmul(x: Float32Array, w: Float32Array, y: Float32Array, rows: number, inFeatures: number, outFeatures: number, threads: number, isa?: string): void;
  /**
   * Each row of logits [rows, vocab] against its label (each in [0, vocab) or ignoreIndex): rowLoss [rows] gets
   * logsumexp(row) - row[label] and argmax [rows] the first index of the row's maximum (0 and -1 where ignored); with gradScale a
   * number (not null) the row is overwritten in place by gradScale (softmax(row) - onehot(label)), zero where ignored.
   * Synchronously on this thread and up to threads - 1 more (each a range of rows). Throws TypeError / RangeError for arrays of
   * other sizes or types, a label out of range, overlaps, or an unknown isa.
   */
  crossEntropy(
    logits: Float32Array,
    labels: Int32Array,
    rowLoss: Float32Array,
    argmax: Int32Array,
    rows: number,
    vocab: number,
    ignoreIndex: number,
    gradScale: number | null,
    threads: number,
    isa?: string,
  ): void;
  /**
   * Rotary embedding ("rotate half") of x [tokens, heads, headDim] by cos and sin [tableRows, headDim] (row token % tableRows),
   * forward or (backward) its transpose, into y (x itself or a separate array), synchronously on this thread and up to threads - 1
   * more (each a range of tokens, when each gets 64K floats). Throws TypeError / RangeError for arrays of other sizes, tokens not a
   * multiple of tableRows, an odd headDim, overlaps, or an unknown isa.
   */
  rope(
    x: Float32Array,
    cos: Float32Array,
    sin: Float32Array,
    y: Float32Array,
    tokens: number,
    heads: number,
    headDim: number,
    tableRows: number,
    backward: boolean,
    threads: number,
    isa?: string,
  ): void;
  /** LayerNorm of x [rows, h] into y [rows, h], mean and rstd [rows], on threads as rope (ranges of rows); throws as rope. */
  layerNormForward(
    x: Float32Array,
    gamma: Float32Array,
    beta: Float32Array,
    y: Float32Array,
    mean: Float32Array,
    rstd: Float32Array,
    rows: number,
    h: number,
    eps: number,
    threads: number,
    isa?: string,
  ): void;
  /**
   * Its backward into dx [rows, h], dGamma and dBeta [h] (overwritten; summed in float64 per chunk of 256 rows, the chunks in order:
   * the same bits for any thread count), as layerNormForward.
   */
  layerNormBackward(
    x: Float32Array,
    gamma: Float32Array,
    mean: Float32Array,
    rstd: Float32Array,
    dy: Float32Array,
    dx: Float32Array,
    dGamma: Float32Array,
    dBeta: Float32Array,
    rows: number,
    h: number,
    threads: number,
    isa?: string,
  ): void;
  /**
   * threads, isa, cuda: the attention op's kernels. graphThreads (default 1), memoryArena and allowSpinning (default false): the
   * sessions' intra-op threads, CPU arena with memory-pattern planning, and spinning, for graphs other than the attention op's.
   */
  Runtime: new (options: {
    threads: number;
    isa?: string;
    cuda?: boolean;
    graphThreads?: number;
    memoryArena?: boolean;
    allowSpinning?: boolean;
  }) => NativeRuntime;
  Session: new (runtime: NativeRuntime, model: Uint8Array) => NativeSession;
}

export type NativeLoad = { ok: true; binding: NativeBinding; info: NativeInfo; path: string } | { ok: false; error: FusedAttentionError };

const require = createRequire(import.meta.url);
const packageDir = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const BUILD_HINT =
  "build it with `npm rebuild @ulysses/native-ops` (pnpm: `pnpm rebuild @ulysses/native-ops`) in the project that installed it, " +
  "or `pnpm --filter @ulysses/native-ops build:native` inside the ulysses-ts repository " +
  "(needs a C++ compiler, and apt-get access to Debian's mirror for the ONNX Runtime headers)";

/** Where the addon is looked for (ULYSSES_FUSED_ATTENTION_ADDON overrides). */
export function addonPath(): string {
  return process.env.ULYSSES_FUSED_ATTENTION_ADDON ?? join(packageDir, "build", "Release", "ulysses_fused_attention.node");
}

/** The libonnxruntime.so.1 that onnxruntime-node ships for this platform. */
function ortLibraryPath(): string {
  const main = require.resolve("onnxruntime-node"); // .../onnxruntime-node/dist/index.js
  return join(dirname(main), "..", "bin", "napi-v6", process.platform, process.arch, "libonnxruntime.so.1");
}

let cached: NativeLoad | undefined;

/** Loads (once per thread) onnxruntime-node, then the addon. */
export function loadNative(): NativeLoad {
  if (cached) return cached;
  const path = addonPath();
  try {
    if (process.platform !== "linux") throw new FusedAttentionError(`the fused-attention addon supports Linux only, not ${process.platform}`);
    if (!existsSync(path)) throw new FusedAttentionError(`the fused-attention addon is not built (no ${path}); ${BUILD_HINT}`);
    require("onnxruntime-node"); // loads libonnxruntime.so.1 into the process first
    const binding = require(path) as NativeBinding;
    const info = binding.init(ortLibraryPath());
    cached = { ok: true, binding, info, path };
  } catch (error) {
    const wrapped =
      error instanceof FusedAttentionError
        ? error
        : new FusedAttentionError(`the fused-attention addon at ${path} failed to load: ${(error as Error).message}; ${BUILD_HINT}`, { cause: error });
    cached = { ok: false, error: wrapped };
  }
  return cached;
}

/** glibc's own limit of the mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX): 32 MiB. */
export const MALLOC_MMAP_THRESHOLD_MAX = 1 << 25;

function mallocSetting(name: string, bytes: number, max: number, set: (binding: NativeBinding) => boolean): boolean {
  if (!Number.isInteger(bytes) || bytes < 4096 || bytes > max)
    throw new FusedAttentionError(`${name}: bytes must be an integer in [4096, ${max}], got ${bytes}`);
  const load = loadNative();
  return load.ok ? set(load.binding) : false;
}

/**
 * Makes glibc serve allocations of at least `bytes` with mmap, so that freed
 * large buffers (activations, ONNX Runtime outputs) go back to the OS instead
 * of staying in the heap: glibc otherwise raises this threshold to the
 * largest block ever freed (up to 32 MiB), and a training step's peak RSS
 * then counts every buffer it freed. Applies to the whole process. Returns
 * false, changing nothing, when the addon is not loaded or the C library is
 * not glibc.
 */
export function setMallocMmapThreshold(bytes: number): boolean {
  return mallocSetting("setMallocMmapThreshold", bytes, MALLOC_MMAP_THRESHOLD_MAX, (b) => b.setMmapThreshold(bytes));
}

/**
 * Makes glibc keep up to `bytes` of free memory at the top of each heap
 * instead of returning it to the OS (its default trims above 128 KiB, or
 * twice the dynamic mmap threshold): a step that frees its activations and
 * allocates them again then reuses the same pages instead of faulting in new
 * ones (on this project's 2-core VM a page fault costs about 10 us, and the
 * default run at N = 4096 faulted 20 000 pages a step). The freed memory
 * stays in the process's RSS. Applies to the whole process; returns false,
 * changing nothing, when the addon is not loaded or the C library is not
 * glibc.
 */
export function setMallocTrimThreshold(bytes: number): boolean {
  return mallocSetting("setMallocTrimThreshold", bytes, 2 ** 31 - 1, (b) => b.setTrimThreshold(bytes));
}

/**
 * `length` float32 elements of process-wide memory named `name`
 * (NativeBinding.sharedMemory): every thread of the process that asks for the
 * name gets a view of the same elements, in an ordinary ArrayBuffer that ONNX
 * Runtime accepts (it refuses SharedArrayBuffers). Zeroed when first mapped.
 * The memory stays while any view of it is alive. Needs the addon.
 */
export function processSharedFloats(name: string, length: number): Float32Array {
  if (!Number.isSafeInteger(length) || length < 1) throw new FusedAttentionError(`processSharedFloats: length must be a positive integer, got ${length}`);
  const native = loadNative();
  if (!native.ok) throw new FusedAttentionError(`one copy of the weights per process needs the native addon: ${native.error.message}`, { cause: native.error });
  return new Float32Array(native.binding.sharedMemory(name, Float32Array.BYTES_PER_ELEMENT * length));
}
