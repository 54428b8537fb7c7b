/**
 * A Channel is what the data-moving functions need from a group: the addon,
 * the group's lane and communicator ids, its rank and size, reusable scratch
 * memory, and `run`, which applies the group's timeout and failure policy to
 * one native call. Groups build channels; moves and reductions use them.
 */
import type { DType, Storage } from "@ulysses/tensors";
import { allocateStorage, bytesPerElement } from "@ulysses/tensors";
import type { NativeMpi } from "./addon.js";

export interface Channel {
  native: NativeMpi;
  lane: number;
  comm: number;
  rank: number;
  size: number;
  scratch: Scratch;
  /** Awaits one native call under the group's timeout; marks the group failed on error. */
  run<T>(what: string, call: () => Promise<T>): Promise<T>;
}

/** The largest count MPI's int arguments can carry. */
export const MPI_INT_MAX = 2 ** 31 - 1;

/**
 * Reusable scratch storage in numbered slots. A slot grows (doubling) and is
 * never shrunk, so hot paths stop paying for fresh pages after the first call.
 */
export class Scratch {
  private buffers: ArrayBuffer[] = [];

  /** `elements` elements of `dtype` in slot `slot` (contents undefined). */
  view(slot: number, dtype: DType, elements: number): Storage {
    const bytes = elements * bytesPerElement(dtype);
    let buffer = this.buffers[slot];
    if (!buffer || buffer.byteLength < bytes) {
      buffer = new ArrayBuffer(Math.max(bytes, 2 * (buffer?.byteLength ?? 0), 64));
      this.buffers[slot] = buffer;
    }
    return allocateStorage(dtype, elements, buffer, 0);
  }

  release(): void {
    this.buffers = [];
  }
}

/** Exclusive prefix sums: the displacement of each block. */
export function displacements(counts: readonly number[]): number[] {
  const out: number[] = [];
  let at = 0;
  for (const c of counts) {
    out.push(at);
    at += c;
  }
  return out;
}
