/**
 * TensorPool: recycles the float32 buffers a wrapper allocates on its hot
 * path (the exchanges' outputs, the ring's blocks), as tensors of a shape:
 * @ulysses/kernels' BufferPool underneath. `take` hands out a tensor of the
 * requested shape, reusing a returned buffer of the same size when there is
 * one; `give` takes back only buffers this pool handed out (any other tensor
 * is ignored), so callers can pass whatever they hold.
 */
import { BufferPool } from "@ulysses/kernels";
import { numel, Tensor } from "@ulysses/tensors";

type F32 = Tensor<"float32">;

export class TensorPool {
  private readonly buffers: BufferPool;

  /** Keeps at most `perSize` idle buffers of each size. */
  constructor(perSize = 64) {
    this.buffers = new BufferPool({ perSize });
  }

  /** A tensor of `shape`; zero-filled when `zero`, otherwise with arbitrary contents. */
  take(shape: readonly number[], zero: boolean): F32 {
    const data = this.buffers.take("float32", numel(shape)) as Float32Array;
    if (zero) data.fill(0);
    return new Tensor("float32", shape, data);
  }

  /** Returns tensors' buffers for reuse; the caller must not touch them afterwards. */
  give(...tensors: readonly (F32 | undefined)[]): void {
    for (const t of tensors) if (t !== undefined) this.buffers.give(t.data);
  }

  /** Bytes held by idle buffers. */
  get idleBytes(): number {
    return this.buffers.bytes;
  }
}
