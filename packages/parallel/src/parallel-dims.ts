/**
 * ParallelDims: the parallel layout of a run, validated once. The world of
 * sp x dp ranks is split (through collectives' `splitWorld`) into SP groups
 * of consecutive ranks, which hold one sequence between them, and DP groups,
 * which hold different sequences; world rank w = d * sp + s. The checks run
 * before any group is built or any message is sent, and one message names
 * every value that is off: sp, dp and the world size, heads and kv heads
 * (Ulysses gives every rank of its group at least one query head;
 * all-gather-KV and ring keep every head on every rank), the hybrid degrees
 * (u x r = sp), the sequence layout, the sequence length (every rank needs
 * at least one token).
 *
 * Hybrid attention splits each SP group again (`splitWorld(sp, { sp: u,
 * dp: r })`): Ulysses groups of u consecutive SP ranks, ring groups of r
 * ranks u apart. The sequence layout defaults to zigzag when a ring runs
 * (ring, hybrid with r > 1: the model is causal) and contiguous otherwise.
 */
import { splitWorld, type ProcessGroup } from "@ulysses/collectives";
import { ParallelError } from "./errors.js";
import type { LocalAttention } from "@ulysses/kernels";
import type { SchemeGroups, SequenceParallelScheme } from "./scheme.js";
import type { ShardedAttention } from "./sharded-attention.js";
import { findSequenceParallelScheme, sequenceParallelScheme, sequenceParallelSchemeNames } from "./scheme-registry.js";
import { SEQUENCE_LAYOUTS, shardRuns, type SequenceLayoutKind, type SequenceRun } from "./sequence-shards.js";

/** How each layer's attention is sequence-parallelised: the name of a registered scheme (scheme-registry.ts). */
export type SequenceParallelKind = "ulysses" | "allgather" | "ring" | "hybrid" | (string & {});

export interface ParallelDimsOptions {
  /** Ranks sharing one sequence. */
  sp: number;
  /** Data-parallel replicas (default 1). */
  dp?: number;
  /** default "ulysses" */
  attention?: SequenceParallelKind;
  /** Hybrid: ranks of each Ulysses group (u); default sp / ringDegree, or gcd(sp, kvHeads) when neither is given. */
  ulyssesDegree?: number;
  /** Hybrid: Ulysses groups around the ring (r = sp / u). */
  ringDegree?: number;
  /** How the sequence is cut over the SP ranks (default zigzag when a ring runs, else contiguous). */
  layout?: SequenceLayoutKind;
  /** Ulysses: pipeline the exchanges with the local kernel in this many chunks of heads (PipelinedUlyssesAttention; default 1, off). */
  pipelineChunks?: number;
}

/** The layout's resolved degrees: Ulysses groups of `u` ranks, `r` of them around the ring, and the sequence layout. */
export interface ResolvedDims {
  attention: SequenceParallelKind;
  ulyssesDegree: number;
  ringDegree: number;
  layout: SequenceLayoutKind;
}

/** The degrees and layout `options` imply (before validation: may be inconsistent); an unknown scheme is refused. */
export function resolveDims(options: ParallelDimsOptions, kvHeads: number): ResolvedDims {
  const attention = options.attention ?? "ulysses";
  const { ulyssesDegree, ringDegree } = sequenceParallelScheme(attention).resolve(options, kvHeads);
  return { attention, ulyssesDegree, ringDegree, layout: options.layout ?? (ringDegree > 1 ? "zigzag" : "contiguous") };
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
  ulyssesDegree: string;
  ringDegree: string;
  layout: string;
  pipelineChunks: string;
}

const DEFAULT_NAMES: ParallelDimsNames = {
  sp: "sp",
  dp: "dp",
  heads: "heads",
  seqLength: "seq",
  attention: "attention",
  ulyssesDegree: "ulyssesDegree",
  ringDegree: "ringDegree",
  layout: "layout",
  pipelineChunks: "pipelineChunks",
};

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
  const scheme = findSequenceParallelScheme(attention);
  if (scheme === undefined) problems.push(`${n.attention} must be one of ${sequenceParallelSchemeNames().join(", ")}, got '${String(attention)}'`);
  if (sp * dp !== shape.worldSize) problems.push(`${n.sp} ${sp} x ${n.dp} ${dp} = ${sp * dp} ranks, but the world has ${shape.worldSize}`);
  if (scheme === undefined) return problems;
  problems.push(...settingProblems(scheme, options, n));
  const dims = resolveDims(options, shape.kvHeads);
  const { ulyssesDegree: u, ringDegree: r } = dims;
  problems.push(...scheme.problems(options, shape, dims, n));
  if (!Number.isInteger(u) || u < 1 || !Number.isInteger(r) || r < 1 || u * r !== sp) return problems;
  if (!SEQUENCE_LAYOUTS.includes(dims.layout)) {
    problems.push(`${n.layout} must be one of ${SEQUENCE_LAYOUTS.join(", ")}, got '${String(dims.layout)}'`);
    return problems;
  }
  if (dims.layout === "zigzag" && r === 1)
    problems.push(
      `${n.layout} zigzag balances a ring; ${attention} attention${scheme.settings.includes("ringDegree") ? ` with ${n.ringDegree} 1` : ""} has none (use contiguous)`,
    );
  // N >= sp leaves every rank a token in either layout (zigzag: each of the r chunk pairs holds at least u tokens)
  if (shape.seqLength < sp) problems.push(`${n.seqLength} ${shape.seqLength} is too short for ${n.sp} ${sp}: every rank needs at least one token`);
  return problems;
}

/** Settings given to a scheme that does not read them, naming the schemes that do. */
function settingProblems(scheme: SequenceParallelScheme, options: ParallelDimsOptions, n: ParallelDimsNames): string[] {
  const problems: string[] = [];
  const readers = (key: SequenceParallelScheme["settings"][number]) =>
    sequenceParallelSchemeNames().filter((name) => findSequenceParallelScheme(name)!.settings.includes(key));
  for (const key of ["ulyssesDegree", "ringDegree"] as const) {
    const value = options[key];
    if (value !== undefined && !scheme.settings.includes(key))
      problems.push(`${n[key]} ${value} is for ${readers(key).join(" or ")} attention only (${n.attention} is ${scheme.name})`);
  }
  const g = options.pipelineChunks;
  if (g !== undefined && g !== 1 && !scheme.settings.includes("pipelineChunks"))
    problems.push(`${n.pipelineChunks} ${g} pipelines Ulysses' exchanges; ${n.attention} is ${scheme.name}`);
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

/** Hybrid attention's subgroups of one SP group. */
export interface HybridGroups {
  /** u consecutive SP ranks. */
  ulysses: ProcessGroup;
  /** r SP ranks, u apart. */
  ring: ProcessGroup;
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
    /** The scheme's descriptor (scheme-registry.ts). */
    readonly scheme: SequenceParallelScheme,
    /** Ulysses degree u (sp for Ulysses and all-gather, 1 for ring). */
    readonly ulyssesDegree: number,
    /** Ring degree r (1 for Ulysses and all-gather, sp for ring). */
    readonly ringDegree: number,
    readonly layout: SequenceLayoutKind,
    /** The scheme's subgroups of this rank's SP group (empty when it needs none). */
    readonly schemeGroups: SchemeGroups,
    /** Chunks of heads Ulysses pipelines with the local kernel (1: off). */
    readonly pipelineChunks: number,
  ) {}

  /** Collective over `world`: validates the layout, then builds the groups. */
  static async create(world: ProcessGroup, options: ParallelDimsOptions, shape: Omit<ParallelShape, "worldSize">): Promise<ParallelDims> {
    validateParallelDims(options, { ...shape, worldSize: world.size });
    const dp = options.dp ?? 1;
    const { attention, ulyssesDegree, ringDegree, layout } = resolveDims(options, shape.kvHeads);
    const scheme = sequenceParallelScheme(attention);
    const groups = dp === 1 ? { sp: world, dp: null } : await splitWorld(world, { sp: options.sp, dp });
    const schemeGroups = (await scheme.groups?.(groups.sp, { ulyssesDegree, ringDegree })) ?? {};
    return new ParallelDims(world, groups.sp, groups.dp, options.sp, dp, scheme, ulyssesDegree, ringDegree, layout, schemeGroups, options.pipelineChunks ?? 1);
  }

  /** The scheme's name. */
  get attention(): SequenceParallelKind {
    return this.scheme.name;
  }

  /** Hybrid attention's subgroups (null for schemes without them). */
  get hybridGroups(): HybridGroups | null {
    const { ulysses, ring } = this.schemeGroups;
    return ulysses !== undefined && ring !== undefined ? { ulysses, ring } : null;
  }

  /** The sharded attention of one local kernel under this layout. */
  createAttention(local: LocalAttention): ShardedAttention {
    const degrees = { ulyssesDegree: this.ulyssesDegree, ringDegree: this.ringDegree };
    return this.scheme.create(local, { group: this.spGroup, groups: this.schemeGroups, degrees, pipelineChunks: this.pipelineChunks });
  }

  /** Every SP rank's runs of positions for sequences of `seqLength` tokens under this layout. */
  runs(seqLength: number): SequenceRun[][] {
    return shardRuns(seqLength, this.sp, this.layout, this.ringDegree);
  }

  /** This rank's index among the DP replicas. */
  get dpRank(): number {
    return Math.floor(this.world.rank / this.sp);
  }
}
