/**
 * Collects freed tensors on a schedule of bytes allocated. Tensors are
 * ArrayBuffers: the memory of one nothing references any more goes back only
 * when V8 next collects, and V8 schedules that by its own heap and by external
 * memory grown since the last collection (tens of MiB per isolate). Between
 * collections the freed buffers still count in RSS, so a rank's peak is its
 * live tensors plus whatever garbage happened to be uncollected at that
 * moment: on the trainer's lean rows (N = 8K-16K, hidden 256, 2-core VM) that
 * moved the peak by 20-100 MiB from one run to the next. Collecting after every
 * `everyBytes` of op outputs bounds the garbage to about that much per rank.
 *
 * The collection is V8's full one (major GC), from `gc`, exposed at run time
 * with `--expose-gc` in a fresh context; in each worker thread (each rank's
 * own isolate) separately.
 *
 * When the caller knows an op's output size before running it (the
 * SessionCache does for a shape it has run before), `willAllocate` collects
 * first if those outputs would reach the budget: the garbage goes before the
 * new outputs arrive, not after. A loss tile's [hidden, vocab] head weight
 * gradient (32 MiB at vocab 32768) is then never resident next to the previous
 * tile's, already added into the flat gradient and dropped.
 */
import v8 from "node:v8";
import vm from "node:vm";
import { KernelError } from "../errors.js";

type Gc = () => void;

let gcOfThisIsolate: Gc | undefined;

/** V8's `gc` for the calling thread's isolate (the process's own `gc` under --expose-gc, else exposed now). */
function exposedGc(): Gc {
  if (gcOfThisIsolate) return gcOfThisIsolate;
  const global = (globalThis as { gc?: unknown }).gc;
  if (typeof global === "function") gcOfThisIsolate = global as Gc;
  else {
    v8.setFlagsFromString("--expose-gc");
    const fromContext = vm.runInNewContext("typeof gc === 'function' ? gc : undefined") as unknown;
    if (typeof fromContext !== "function") throw new KernelError("collectGarbageEvery: V8's gc could not be exposed in this Node.js (--expose-gc)");
    gcOfThisIsolate = fromContext as Gc;
  }
  return gcOfThisIsolate;
}

/**
 * One full collection now, on the calling thread's isolate: for a caller that
 * has just dropped the last reference to a buffer large enough that waiting
 * for V8's own schedule would leave it resident through the next phase (the
 * Trainer's held gradients under ZeRO-2, hundreds of MiB at real vocabularies).
 */
export function collectGarbageNow(): void {
  exposedGc()();
}

export class GarbageCollector {
  private sinceLast = 0;
  private readonly gc: Gc;
  /** Collections run so far, and their total milliseconds. */
  collections = 0;
  milliseconds = 0;

  constructor(readonly everyBytes: number) {
    if (!Number.isFinite(everyBytes) || everyBytes <= 0) throw new KernelError(`collectGarbageEvery must be a positive number of bytes, got ${everyBytes}`);
    this.gc = exposedGc();
  }

  /** Before outputs of `bytes` are allocated: collects now if they would bring the count since the last collection to everyBytes. */
  willAllocate(bytes: number): void {
    if (this.sinceLast > 0 && this.sinceLast + bytes >= this.everyBytes) this.collect();
  }

  /**
   * Counts `bytes` just allocated; collects once at least everyBytes were
   * allocated since the last collection, unless `announced` (willAllocate was
   * told of them: the next willAllocate or allocated collects).
   */
  allocated(bytes: number, announced = false): void {
    this.sinceLast += bytes;
    if (!announced && this.sinceLast >= this.everyBytes) this.collect();
  }

  private collect(): void {
    const started = performance.now();
    this.gc();
    this.milliseconds += performance.now() - started;
    this.collections++;
    this.sinceLast = 0;
  }
}

/** The largest percent setHeapGrowingPercent takes: V8 then lets its heap grow 101x between full collections. */
/** Without arenas (the trainer's --no-memory-arena): V8 collects freed tensors after every this many bytes of op outputs per rank (a GarbageCollector's budget). */
export const COLLECT_GARBAGE_EVERY_BYTES = 16 * 1024 * 1024;

/**
 * With --memory-arena: V8's heap growing factor, as a percent (900: 10x; setHeapGrowingPercent). On the speed
 * rows of bench:memory (SP 2, N = 4096, 2-core VM) a step took 614 / 625 ms against 750 ms with V8's own factor (full collections
 * 30 against 230 in 12 steps), and the peak grew by 45-50 MiB (80 MiB at N = 16384): the training memory account's V8_DEFERRED_BYTES.
 * Without arenas the trainer collects every 16 MiB of outputs itself, and V8's own factor is kept.
 */
export const ARENA_HEAP_GROWING_PERCENT = 900;

export const MAX_HEAP_GROWING_PERCENT = 10_000;

/**
 * Sets V8's heap growing factor for the whole process, every isolate (each
 * worker thread's rank too): after a full collection, V8 starts the next one
 * once its heap has grown to (1 + percent / 100) times what survived. 0 is
 * V8's default: a factor it picks itself from its measured speeds.
 *
 * A rank's JavaScript heap is small (about 8 MiB: the tensors' wrappers,
 * shapes and promises; the tensors' data are ArrayBuffers outside it), so
 * V8's own factor starts a full collection every few MiB of wrappers kept
 * past a young-generation collection: about 10 per training step per rank at
 * N = 4096 on the trainer's speed rows, each marked by V8's helper threads on
 * the same cores as the ranks' kernels (17% of the CPU samples there). The
 * freed tensors then wait longer for their collection, so the peak grows a
 * little (see the trainer's memory account).
 *
 * Takes effect at once, in isolates already running too (V8 reads it each
 * time it sizes its heap after a collection).
 */
export function setHeapGrowingPercent(percent: number): void {
  if (!Number.isInteger(percent) || percent < 0 || percent > MAX_HEAP_GROWING_PERCENT) {
    throw new KernelError(`heap growing percent must be an integer from 0 to ${MAX_HEAP_GROWING_PERCENT}, got ${percent}`);
  }
  v8.setFlagsFromString(`--heap-growing-percent=${percent}`);
}
