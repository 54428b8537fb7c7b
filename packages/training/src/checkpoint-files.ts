/**
 * Checkpoint files read tensor by tensor straight into their places, with no
 * copy of the file in memory: a trainer's resume (each rank only what it
 * holds, its slice of the moments and, under ZeRO-3, of the weights) and the
 * weights alone into a whole store (the export after a ZeRO-3 run).
 */
import { readSafetensorRanges, type GptConfig, type ParameterStore } from "@ulysses/model";
import { CHECKPOINT_MAX_HEADER_BYTES, checkCheckpointHeader, modelConfig, MOMENTS, type CheckpointInfo, type LoadCheckpointOptions } from "./checkpoint.js";
import { TrainingError } from "./errors.js";
import type { Trainer } from "./train-step.js";

/**
 * Restores a checkpoint file into `trainer` reading only what this rank
 * holds: each parameter (or, sharded, its part of this rank's slice)
 * straight into the model's weights and this rank's slice of each AdamW
 * moment (the whole moment without ZeRO), with no copy of the file in
 * memory. The header is checked first, as loadCheckpoint's, then against the
 * trainer's model (`options.check` runs before that); a file without moments
 * is refused. Returns what the header says.
 */
export function restoreCheckpointFile(trainer: Trainer, file: string, options: LoadCheckpointOptions = {}): CheckpointInfo {
  const { optimizer } = trainer;
  const info = readWeightsInto(file, trainer.model.params, trainer.model.config, options, (name) => ({
    target: bytesOf(name === "optimizer.m" ? optimizer.m : optimizer.v),
    offset: 4 * optimizer.offset,
  }));
  optimizer.step = info.step;
  trainer.weightsChanged();
  return info;
}

/**
 * A checkpoint file's weights into `params` (a whole store of the model
 * `config`), read tensor by tensor and checked as restoreCheckpointFile's:
 * what the trainer exports after a ZeRO-3 run, where no rank holds them all.
 */
export function checkpointWeights(file: string, params: ParameterStore, config: GptConfig, options: LoadCheckpointOptions = {}): CheckpointInfo {
  return readWeightsInto(file, params, config, options, null);
}

function bytesOf(x: Float32Array): Uint8Array {
  return new Uint8Array(x.buffer, x.byteOffset, x.byteLength);
}

/**
 * Reads a checkpoint's weights into `params`, the part each parameter has
 * in the store (all of it unless the weights are sharded), after checking
 * the header (options.check first, then that it is `config`'s model). With
 * `moment` (where a moment's bytes go, by name: the rank's slice and its
 * byte offset in the file's vector) the file must hold the moments; without,
 * they are skipped.
 */
function readWeightsInto(
  file: string,
  params: ParameterStore,
  config: GptConfig,
  options: LoadCheckpointOptions,
  moment: ((name: string) => { target: Uint8Array; offset: number }) | null,
): CheckpointInfo {
  let info: CheckpointInfo | undefined;
  readSafetensorRanges(
    file,
    (entry) => {
      if ((MOMENTS as readonly string[]).includes(entry.name)) return moment === null ? null : moment(entry.name);
      const { begin, end, view } = params.heldPart(entry.name);
      return end === begin ? null : { target: bytesOf(view), offset: 4 * begin };
    },
    {
      maxHeaderBytes: CHECKPOINT_MAX_HEADER_BYTES,
      check: (header) => {
        info = { file, ...checkCheckpointHeader(file, header) };
        options.check?.(info);
        const want = JSON.stringify(modelConfig(config));
        const got = JSON.stringify(info.config);
        if (want !== got) throw new TrainingError(`checkpoint '${file}' was written for model ${got}, not ${want}`);
        if (moment !== null && !header.entries.some((e) => e.name === "optimizer.m"))
          throw new TrainingError(`checkpoint '${file}' has no optimizer state; it cannot resume training`);
      },
    },
  );
  return info!;
}
