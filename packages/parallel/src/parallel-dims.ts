/**
 * ParallelDims: the parallel layout of a run, validated once. The world of
 * sp x dp ranks is split (through collectives' `splitWorld`) into SP groups
 * of consecutive ranks, which hold one sequence between them, and DP groups,
 * which hold different sequences; world rank w = d * sp + s. The checks run
 * before any group is built or any message is sent, and one message names
 * every value that is off: sp, dp and the world size, heads and kv heads
 * (Ulysses gives every rank at least one query head; all-gather-KV and ring
 * keep every head on every rank), the sequence length (every rank needs at
 * least one token).
 */
import { splitWorld, type ProcessGroup } from "@ulysses/collectives";
import { ParallelError } from "./errors.js";

/** How each layer's attention is sequence-parallelised. */
export type SequenceParallelKind = "ulysses" | "allgather" | "ring";
export const SEQUENCE_PARALLEL_KINDS: readonly SequenceParallelKind[] = ["ulysses", "allgather", "ring"];

export interface ParallelDimsOptions {
  /** Ranks sharing one sequence. */
  sp: number;
  /** Data-parallel replicas (default 1). */
  dp?: number;
  /** default "ulysses" */
  attention?: SequenceParallelKind;
}

/** What the layout is checked against. */
export interface ParallelShape {
  worldSize: number;
  heads: number;
  kvHeads: number;
  /** Tokens per sequence. */
  seqLength: number;
}

/** How messages call each value (a CLI passes its flag names: { sp: "--sp", heads: "--heads", ... }). */
export interface ParallelDimsNames {
  sp: string;
  dp: string;
  heads: string;
  seqLength: string;
  attention: string;
}

const DEFAULT_NAMES: ParallelDimsNames = { sp: "sp", dp: "dp", heads: "heads", seqLength: "seq", attention: "attention" };

/** Every problem of a layout, each naming its values (empty when it is fine). No communication. */
export function parallelDimsProblems(options: ParallelDimsOptions, shape: ParallelShape, names: Partial<ParallelDimsNames> = {}): string[] {
  const n = { ...DEFAULT_NAMES, ...names };
  const { sp } = options;
  const dp = options.dp ?? 1;
  const attention = options.attention ?? "ulysses";
  const problems: string[] = [];
  const positive = (name: string, value: number) => {
    if (!Number.isInteger(value) || value < 1) problems.push(`${name} must be a positive integer, got ${value}`);
  };
  positive(n.sp, sp);
  positive(n.dp, dp);
  if (problems.length > 0) return problems;
  if (!SEQUENCE_PARALLEL_KINDS.includes(attention))
    problems.push(`${n.attention} must be one of ${SEQUENCE_PARALLEL_KINDS.join(", ")}, got '${String(attention)}'`);
  if (sp * dp !== shape.worldSize) problems.push(`${n.sp} ${sp} x ${n.dp} ${dp} = ${sp * dp} ranks, but the world has ${shape.worldSize}`);
  if (attention === "ulysses" && shape.heads < sp) {
    problems.push(
      `${n.heads} ${shape.heads} is smaller than ${n.sp} ${sp}: Ulysses gives every rank at least one attention head (use ${n.sp} <= ${n.heads}, or allgather or ring attention)`,
    );
  }
  if (shape.seqLength < sp) problems.push(`${n.seqLength} ${shape.seqLength} is too short for ${n.sp} ${sp}: every rank needs at least one token`);
  return problems;
}

/** Throws one ParallelError naming every problem of the layout. */
export function validateParallelDims(options: ParallelDimsOptions, shape: ParallelShape): void {
  const problems = parallelDimsProblems(options, shape);
  if (problems.length > 0)
    throw new ParallelError(
      `parallel layout (world ${shape.worldSize}, sp ${options.sp}, dp ${options.dp ?? 1}, heads ${shape.heads}/${shape.kvHeads}, seq ${shape.seqLength}): ${problems.join("; ")}`,
    );
}

export class ParallelDims {
  private constructor(
    /** Every rank of the run; gradients are summed over it. */
    readonly world: ProcessGroup,
    /** This rank's sequence-parallel group. */
    readonly spGroup: ProcessGroup,
    /** This rank's data-parallel group (null when dp is 1: the SP group is the world). */
    readonly dpGroup: ProcessGroup | null,
    readonly sp: number,
    readonly dp: number,
    readonly attention: SequenceParallelKind,
  ) {}

  /** Collective over `world`: validates the layout, then builds the groups. */
  static async create(world: ProcessGroup, options: ParallelDimsOptions, shape: Omit<ParallelShape, "worldSize">): Promise<ParallelDims> {
    validateParallelDims(options, { ...shape, worldSize: world.size });
    const dp = options.dp ?? 1;
    const attention = options.attention ?? "ulysses";
    if (dp === 1) return new ParallelDims(world, world, null, options.sp, dp, attention);
    const groups = await splitWorld(world, { sp: options.sp, dp });
    return new ParallelDims(world, groups.sp, groups.dp, options.sp, dp, attention);
  }

  /** This rank's index among the DP replicas. */
  get dpRank(): number {
    return Math.floor(this.world.rank / this.sp);
  }
}
