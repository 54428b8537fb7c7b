/**
 * Data movement for validated plans: all-to-all (MPI_Alltoall when every
 * block has the same size, MPI_Alltoallv for uneven splits), all-gather
 * (MPI_Allgather / MPI_Allgatherv) and broadcast (MPI_Bcast). Buffers are the
 * callers' TypedArrays, passed to MPI without copies; send and receive memory
 * are always distinct. Validation happened before (planOp); reductions live
 * in reductions.ts.
 */
import { outputShapeOf, type Plan } from "@ulysses/collectives/backend";
import { Tensor } from "@ulysses/tensors";
import { displacements, MPI_INT_MAX, type Channel } from "./channel.js";
import { MpiError } from "./errors.js";

type PlanOf<K extends Plan["op"]> = Extract<Plan, { op: K }>;

/** Fails (identically on every rank: the plan is the same everywhere) when a byte count exceeds MPI's int range. */
export function checkIntRange(plan: Plan, byteTotals: readonly number[]): void {
  const worst = Math.max(0, ...byteTotals);
  if (worst > MPI_INT_MAX) {
    throw new MpiError(
      `${plan.op}: a rank's buffer holds ${worst} bytes, over the ${MPI_INT_MAX}-byte limit of MPI's int counts in the mpi backend; split the operation`,
    );
  }
}

/** The output tensor of rank `rank`: the caller's (shape already checked by planOp) or a new one. */
export function outputFor(plan: Plan, rank: number, output: Tensor | null): Tensor {
  return output ?? new Tensor(plan.dtype, outputShapeOf(plan, rank));
}

export async function allToAll(channel: Channel, plan: PlanOf<"allToAll">, input: Tensor, output: Tensor | null): Promise<Tensor> {
  const { native, lane, comm, rank } = channel;
  const out = outputFor(plan, rank, output);
  const first = plan.sendRows[0]![0]!;
  if (plan.sendRows.every((row) => row.every((n) => n === first))) {
    checkIntRange(plan, [first * plan.rowBytes]);
    // [P * first, ...rowShape] -> blocks of `first` rows to each rank; out: P blocks in rank order
    await channel.run("allToAll", () => native.alltoall(lane, comm, input.data, out.data, first * plan.rowBytes));
    return out;
  }
  checkIntRange(
    plan,
    plan.sendRows
      .flatMap((row, r) => [row.reduce((a, b) => a + b, 0), plan.sendRows.reduce((acc, from) => acc + from[r]!, 0)])
      .map((rows) => rows * plan.rowBytes),
  );
  const sendCounts = plan.sendRows[rank]!.map((rows) => rows * plan.rowBytes);
  const recvCounts = plan.sendRows.map((from) => from[rank]! * plan.rowBytes);
  await channel.run("allToAll", () =>
    native.alltoallv(lane, comm, input.data, sendCounts, displacements(sendCounts), out.data, recvCounts, displacements(recvCounts)),
  );
  return out;
}

export async function allGather(channel: Channel, plan: PlanOf<"allGather">, input: Tensor, output: Tensor | null): Promise<Tensor> {
  const { native, lane, comm, rank } = channel;
  const out = outputFor(plan, rank, output);
  const counts = plan.rows.map((rows) => rows * plan.rowBytes);
  checkIntRange(plan, [counts.reduce((a, b) => a + b, 0)]);
  if (counts.every((n) => n === counts[0])) {
    // every rank's [rows, ...rowShape] -> out [P * rows, ...rowShape] in rank order
    await channel.run("allGather", () => native.allgather(lane, comm, input.data, out.data));
  } else {
    await channel.run("allGather", () => native.allgatherv(lane, comm, input.data, out.data, counts, displacements(counts)));
  }
  return out;
}

export async function broadcast(channel: Channel, plan: PlanOf<"broadcast">, tensor: Tensor): Promise<Tensor> {
  checkIntRange(plan, [tensor.byteLength]);
  await channel.run("broadcast", () => channel.native.bcast(channel.lane, channel.comm, tensor.data, plan.root));
  return tensor;
}
