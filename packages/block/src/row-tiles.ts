/** Row views and row-tile loops shared by the tiled MLP and attention in head groups. */
import { Tensor } from "@ulysses/tensors";

type F32 = Tensor<"float32">;

/** Rows [start, start + count) of a tensor read as [rows, last dimension] (a weight [in, out], activations [b * s, width] or [b, s, width]), as a view. */
export function rowsOf(t: F32, start: number, count: number): F32 {
  const width = t.shape[t.rank - 1]!;
  return new Tensor("float32", [count, width], t.data.subarray(start * width, (start + count) * width));
}

/** Calls fn(start, count) over rows [0, rowCount) in tiles of `tile` rows (the last one shorter), one after another. */
export async function inRowTiles(rowCount: number, tile: number, fn: (start: number, count: number) => Promise<unknown>): Promise<void> {
  for (let start = 0; start < rowCount; start += tile) await fn(start, Math.min(tile, rowCount - start));
}
