/**
 * The Tensor: a dtype, a shape and contiguous row-major storage. Tensors are
 * plain data; they know nothing about backends. Storage may live on a
 * SharedArrayBuffer (for collectives' exchange areas) or an ordinary
 * ArrayBuffer (everything ONNX Runtime touches: it rejects shared memory).
 *
 * Layout operations (permute, split, concat) live in `layout.ts`; the methods
 * here delegate to them.
 */
import { DTYPES, allocateStorage, bytesPerElement, isDType, storageMatches, type DType, type StorageByDType } from "./dtype.js";
import { TensorError } from "./errors.js";
import { formatShape, numel, resolveReshape, stridesOf, validateShape, type Shape } from "./shape.js";

export interface AllocateOptions {
  /** Place the storage on a new SharedArrayBuffer. */
  shared?: boolean;
}

export class Tensor<D extends DType = DType> {
  readonly dtype: D;
  readonly shape: readonly number[];
  readonly data: StorageByDType[D];

  /**
   * Wraps `data` (not copied) as a tensor of `shape`; allocates zeroed storage
   * when `data` is omitted.
   */
  constructor(dtype: D, shape: Shape, data?: StorageByDType[D]) {
    if (!isDType(dtype)) throw new TensorError(`unknown dtype '${String(dtype)}'; known: ${DTYPES.join(", ")}`);
    validateShape(shape);
    const size = numel(shape);
    if (data === undefined) {
      data = allocateStorage(dtype, size);
    } else {
      if (!storageMatches(dtype, data)) {
        throw new TensorError(`dtype ${dtype} cannot be stored in a ${data.constructor.name} (shape ${formatShape(shape)})`);
      }
      if (data.length !== size) {
        throw new TensorError(`shape ${formatShape(shape)} needs ${size} elements but the data has ${data.length}`);
      }
    }
    this.dtype = dtype;
    this.shape = Object.freeze([...shape]);
    this.data = data;
  }

  /** A zero-filled tensor. */
  static zeros<D extends DType>(dtype: D, shape: Shape, options: AllocateOptions = {}): Tensor<D> {
    validateShape(shape);
    const size = numel(shape);
    if (!options.shared) return new Tensor(dtype, shape);
    const buffer = new SharedArrayBuffer(size * bytesPerElement(dtype));
    return new Tensor(dtype, shape, allocateStorage(dtype, size, buffer));
  }

  /** A tensor holding a copy of `values` (numbers; bigints for int64). */
  static from<D extends DType>(dtype: D, shape: Shape, values: ArrayLike<number> | ArrayLike<bigint>): Tensor<D> {
    const t = new Tensor(dtype, shape);
    if (values.length !== t.size) {
      throw new TensorError(`shape ${formatShape(shape)} needs ${t.size} elements but ${values.length} values were given`);
    }
    if (dtype === "float16" || dtype === "bfloat16") {
      throw new TensorError(`Tensor.from cannot take numbers for ${dtype}; build a float32 tensor and convert it with toDType`);
    }
    const wantsBigint = dtype === "int64";
    const kind = values.length > 0 ? typeof values[0] : undefined;
    if (kind !== undefined && (kind === "bigint") !== wantsBigint) {
      throw new TensorError(
        `Tensor.from(${dtype}): got ${kind} values (first: ${String(values[0])}); ${dtype} takes ${wantsBigint ? "bigint" : "number"} values`,
      );
    }
    (t.data as { set(v: ArrayLike<number> | ArrayLike<bigint>): void }).set(values);
    return t;
  }

  get size(): number {
    return this.data.length;
  }

  get rank(): number {
    return this.shape.length;
  }

  get byteLength(): number {
    return this.data.byteLength;
  }

  get strides(): number[] {
    return stridesOf(this.shape);
  }

  /** True when the storage lives on a SharedArrayBuffer. */
  get isShared(): boolean {
    return typeof SharedArrayBuffer !== "undefined" && this.data.buffer instanceof SharedArrayBuffer;
  }

  /** A view of the same storage with another shape (one dimension may be -1). */
  reshape(shape: Shape): Tensor<D> {
    return new Tensor(this.dtype, resolveReshape(this.shape, shape), this.data);
  }

  /** A copy on fresh ordinary (or shared) memory. */
  clone(options: AllocateOptions = {}): Tensor<D> {
    const out = Tensor.zeros(this.dtype, this.shape, options);
    (out.data as { set(v: ArrayLike<number> | ArrayLike<bigint>): void }).set(this.data);
    return out;
  }

  toString(): string {
    return `Tensor(${this.dtype}, ${formatShape(this.shape)})`;
  }
}
