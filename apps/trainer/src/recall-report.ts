/**
 * What the run header and the summary say about the recall task: where the
 * facts and the queries lie and on which ranks, how far back each answer is
 * (measured on the run's first batch), and the two baselines the accuracy
 * is read against: a random answer token, and the best a model reaches
 * without the rank that holds the facts. The numbers come from the task's
 * construction (@ulysses/training) and the sequence layout
 * (@ulysses/parallel); nothing here trains.
 */
import { shardRuns, type SequenceRun } from "@ulysses/parallel";
import { recallBaselines, recallBatch, recallDistances, recallLayout } from "@ulysses/training";
import { Rng } from "@ulysses/tensors";
import { DATA_STREAM, recallOptionsOf, vocabOf, type TrainConfig } from "./config.js";
import type { RunPlan } from "./plan.js";

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

/** The recall task's report for a run of `config`, cut over the ranks as `plan` lays the sequence out. */
export function recallReport(config: TrainConfig, plan: Pick<RunPlan, "layout" | "ringDegree">): RecallReport {
  const options = recallOptionsOf(config);
  const { factEnd, queryStart, minDistance } = recallLayout(config.seq);
  const runs = shardRuns(config.seq, config.sp, plan.layout, plan.ringDegree);
  const factRanks = ranksHolding(runs, 0, factEnd);
  const queryRanks = ranksHolding(runs, queryStart, config.seq);
  const apart = config.sp > 1 && !queryRanks.some((r) => factRanks.includes(r));
  const { chance, withoutFacts } = recallBaselines(options);
  const rng = new Rng(config.seed, DATA_STREAM);
  const distances = recallDistances(recallBatch(options, config.batch * config.dp, () => rng.uniform())).sort((a, b) => a - b);
  const median = distances[Math.floor(distances.length / 2)]!;
  const where = config.sp === 1 ? "one rank holds all" : apart ? "no rank holds both" : "some rank holds both";
  const header =
    `task: recall, ${config.keys} keys x ${config.values} values (vocab ${vocabOf(config)}): facts at tokens [0, ${factEnd}) on ${rankList(factRanks)}, ` +
    `queries at [${queryStart}, ${config.seq}) on ${rankList(queryRanks)} (${where}); every answer is at least ${minDistance} tokens back ` +
    `(first batch, to the nearest fact holding it: min ${distances[0]}, median ${median}, max ${distances.at(-1)}); ` +
    `chance ${percent(chance)}, best without the facts' rank ${apart ? percent(withoutFacts) : "not defined (a rank holds facts and queries)"}`;
  return { header, chance, withoutFacts: apart ? withoutFacts : null };
}
