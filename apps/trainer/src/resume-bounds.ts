/**
 * Bounds on what a resumed checkpoint states (its header is untrusted data):
 * every size it names that the run would allocate is checked against what
 * the run itself needs before anything is written or allocated. The data
 * state (the shuffle buffer's documents) against the run's document loader,
 * and the model's maxSeq (the ONNX export's RoPE tables) against the memory
 * preflight's estimate of training at --seq. resumeSettings reports each
 * problem as a conflict naming the checkpoint and the key.
 */
import { blockConfigOf, type GptConfig } from "@ulysses/model";
import { DocumentData } from "@ulysses/training";
import { textDataOptions, type TrainConfig } from "./config.js";
import { formatBytes } from "@ulysses/measure";
import { estimateMemory } from "./preflight.js";

/** Copies of the RoPE tables the ONNX export holds at its peak (arrays, graph, serialised bytes: 3.5 GB measured for 1 GiB of tables). */
export const EXPORT_TABLE_COPIES = 4;

/** What is wrong with a checkpoint's data state for the documents of this run (checked, never loaded), or null. */
export function dataStateProblem(config: TrainConfig, state: unknown): string | null {
  let docs: DocumentData;
  try {
    docs = new DocumentData(textDataOptions(config));
  } catch {
    return null; // bad data flags: validateConfig names them
  }
  try {
    docs.checkState(state);
    return null;
  } catch (error) {
    return (error as Error).message;
  } finally {
    docs.close();
  }
}

/**
 * What is wrong with exporting `gpt` at the end of this run, or null: its
 * maxSeq may exceed --seq (a model built for longer sequences), but the
 * export's RoPE tables may not need more than training at --seq does.
 * Nothing is allocated from maxSeq without an export.
 */
export function exportTablesProblem(config: TrainConfig, gpt: GptConfig): string | null {
  if (!config.export || gpt.maxSeq <= config.seq) return null;
  const headDim = blockConfigOf(gpt).headDim;
  const exportBytes = EXPORT_TABLE_COPIES * 2 * 4 * gpt.maxSeq * headDim;
  let runBytes: number;
  try {
    runBytes = estimateMemory(config).bytes;
  } catch {
    return null; // an invalid configuration: validateConfig names it
  }
  if (exportBytes <= runBytes) return null;
  return (
    `config.maxSeq ${gpt.maxSeq} would make the ONNX export's RoPE tables (cos and sin, float32 [maxSeq, head dim ${headDim}], ` +
    `held about ${EXPORT_TABLE_COPIES} times while exporting) need ${formatBytes(exportBytes)}, more than this run needs to train at --seq ${config.seq} ` +
    `(${formatBytes(runBytes)}, the memory preflight's estimate): pass --no-export, or resume a model built for shorter sequences`
  );
}
