/**
 * All-reduce and reduce-scatter, in two modes:
 * - "ordered" (default): the data moves with MPI_Alltoallv / MPI_Allgatherv
 *   and each rank reduces its chunk with the collectives' `reduceInto`, ranks
 *   combined in order 0..P-1. Results are bitwise identical to the local and
 *   threads backends (MPI's own reductions combine in an order of their
 *   choosing, and round float16/bfloat16 at every step).
 * - "mpi": MPI_Allreduce / MPI_Reduce_scatter with MPI's reduction (our own
 *   MPI_Ops for float16/bfloat16); mean = sum, then divide by P.
 * Both move the bytes `trafficOf` accounts for in the direct algorithm.
 */
import { evenSplitSizes, type Storage, type Tensor } from "@ulysses/tensors";
import { reduceInto, type Plan, type Source } from "@ulysses/collectives/backend";
import { displacements, type Channel } from "./channel.js";
import { checkIntRange, outputFor } from "./moves.js";

export type ReductionMode = "ordered" | "mpi";
export const REDUCTION_MODES: readonly ReductionMode[] = ["ordered", "mpi"];

type PlanOf<K extends Plan["op"]> = Extract<Plan, { op: K }>;

/** Every rank's copy of this rank's chunk, gathered into scratch: P blocks of `count` elements. */
async function gatherMyChunks(channel: Channel, plan: Plan, send: Storage, sendCounts: readonly number[], count: number): Promise<Source[]> {
  const { native, lane, comm, size } = channel;
  const bytes = plan.elementBytes;
  const received = channel.scratch.view(0, plan.dtype, count * size);
  const sendBytes = sendCounts.map((n) => n * bytes);
  const recvBytes = new Array<number>(size).fill(count * bytes);
  // input chunks j (sendCounts[j] elements) -> rank j; received: [P, count] in rank order
  await channel.run(plan.op, () => native.alltoallv(lane, comm, send, sendBytes, displacements(sendBytes), received, recvBytes, displacements(recvBytes)));
  return Array.from({ length: size }, (_, j) => ({ data: received, offset: j * count }));
}

export async function allReduce(channel: Channel, plan: PlanOf<"allReduce">, tensor: Tensor, mode: ReductionMode): Promise<Tensor> {
  const { native, lane, comm, size, rank } = channel;
  checkIntRange(plan, [tensor.byteLength]);
  if (size === 1) {
    reduceInto(plan.dtype, plan.reduceOp, tensor.data, 0, [{ data: tensor.data, offset: 0 }], tensor.size);
    return tensor;
  }
  if (mode === "mpi") {
    const op = plan.reduceOp === "max" ? "max" : "sum";
    await channel.run("allReduce", () => native.allreduce(lane, comm, tensor.data, null, plan.dtype, op, plan.reduceOp === "mean" ? size : 1));
    return tensor;
  }
  const chunks = evenSplitSizes(plan.numel, size);
  const mine = chunks[rank]!;
  const sources = await gatherMyChunks(channel, plan, tensor.data, chunks, mine);
  const reduced = channel.scratch.view(1, plan.dtype, mine);
  reduceInto(plan.dtype, plan.reduceOp, reduced, 0, sources, mine);
  const counts = chunks.map((n) => n * plan.elementBytes);
  // reduced chunk r of every rank -> the whole tensor, chunks in rank order
  await channel.run("allReduce", () => native.allgatherv(lane, comm, reduced, tensor.data, counts, displacements(counts)));
  return tensor;
}

export async function reduceScatter(
  channel: Channel,
  plan: PlanOf<"reduceScatter">,
  input: Tensor,
  output: Tensor | null,
  mode: ReductionMode,
): Promise<Tensor> {
  const { native, lane, comm, size, rank } = channel;
  checkIntRange(plan, [input.byteLength]);
  const out = outputFor(plan, rank, output);
  const counts = plan.rows.map((rows) => rows * plan.rowElements);
  const mine = counts[rank]!;
  if (mode === "mpi" && size > 1) {
    const op = plan.reduceOp === "max" ? "max" : "sum";
    await channel.run("reduceScatter", () =>
      native.reduceScatter(lane, comm, input.data, out.data, counts, plan.dtype, op, plan.reduceOp === "mean" ? size : 1),
    );
    return out;
  }
  const sources = size === 1 ? [{ data: input.data, offset: 0 }] : await gatherMyChunks(channel, plan, input.data, counts, mine);
  reduceInto(plan.dtype, plan.reduceOp, out.data, 0, sources, mine);
  return out;
}
