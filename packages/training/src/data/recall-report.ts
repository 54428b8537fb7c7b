/**
 * What a run's header and summary say about the recall task: where the
 * facts and the queries lie and on which ranks, how far back each answer is
 * (measured on the run's first batch), and the two baselines the accuracy
 * is read against: a random answer token, and the best a model reaches
 * without the rank that holds the facts. The numbers come from the task's
 * construction and the sequence layout (@ulysses/parallel); nothing here
 * trains.
 */
import { shardRuns, type Batch, type SequenceLayoutKind, type SequenceRun } from "@ulysses/parallel";
import { recallBaselines, recallDistances, recallLayout, type RecallTaskOptions } from "./recall-task.js";

export interface RecallReport {
  /** The header line. */
  header: string;
  /** Accuracy of a uniformly drawn answer token. */
  chance: number;
  /** The best accuracy without the facts' rank; null when some rank holds facts and queries (SP 1, or a layout that puts both on one rank). */
  withoutFacts: number | null;
}

/** Ranks whose runs meet [start, end). */
function ranksHolding(runs: readonly (readonly SequenceRun[])[], start: number, end: number): number[] {
  return runs.flatMap((own, rank) => (own.some((r) => r.start < end && r.start + r.length > start) ? [rank] : []));
}

function rankList(ranks: readonly number[]): string {
  return ranks.length === 1 ? `rank ${ranks[0]}` : `ranks ${ranks.join(", ")}`;
}

function percent(p: number): string {
  return `${(100 * p).toFixed(1)}%`;
}

/** How a run cuts each sequence over its SP ranks. */
export interface RecallReportLayout {
  sp: number;
  layout: SequenceLayoutKind;
  /** Ranks around a ring (the zigzag layout's chunking follows it). */
  ringDegree: number;
}

/** The recall task's report for a run of `task`, cut over the ranks as `cut` lays the sequence out; `firstBatch` is the run's first global batch. */
export function recallReport(task: RecallTaskOptions, cut: RecallReportLayout, firstBatch: Batch): RecallReport {
  const { seq } = task;
  const { factEnd, queryStart, minDistance } = recallLayout(seq);
  const runs = shardRuns(seq, cut.sp, cut.layout, cut.ringDegree);
  const factRanks = ranksHolding(runs, 0, factEnd);
  const queryRanks = ranksHolding(runs, queryStart, seq);
  const apart = cut.sp > 1 && !queryRanks.some((r) => factRanks.includes(r));
  const { chance, withoutFacts } = recallBaselines(task);
  const distances = recallDistances(firstBatch).sort((a, b) => a - b);
  const median = distances[Math.floor(distances.length / 2)]!;
  const where = cut.sp === 1 ? "one rank holds all" : apart ? "no rank holds both" : "some rank holds both";
  const header =
    `task: recall, ${task.keys} keys x ${task.values} values (vocab ${task.vocab}): facts at tokens [0, ${factEnd}) on ${rankList(factRanks)}, ` +
    `queries at [${queryStart}, ${seq}) on ${rankList(queryRanks)} (${where}); every answer is at least ${minDistance} tokens back ` +
    `(first batch, to the nearest fact holding it: min ${distances[0]}, median ${median}, max ${distances.at(-1)}); ` +
    `chance ${percent(chance)}, best without the facts' rank ${apart ? percent(withoutFacts) : "not defined (a rank holds facts and queries)"}`;
  return { header, chance, withoutFacts: apart ? withoutFacts : null };
}
