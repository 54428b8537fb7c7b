/**
 * Checkpoints shard by shard: under ZeRO the writer streams each moment as
 * the ranks broadcast their slices (no rank gathers a whole moment), and
 * restoreCheckpointFile reads into each rank only its slice. The file's
 * moments are the ranks' slices back to back, bit for bit; a file written at
 * one stage and SP degree restores at another with every rank holding
 * exactly its part of the file. Under ZeRO-3 the weights too are streamed
 * from the ranks holding them, and a rank restores only its slice of them.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { createLocalGroups } from "@ulysses/collectives";
import { ReferenceAttention, ReferenceOps } from "@ulysses/kernels";
import { Gpt, readSafetensors, writeSafetensors, type GptConfig } from "@ulysses/model";
import { ParallelDims, parallelize } from "@ulysses/parallel";
import { Rng, type Tensor } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { inspectCheckpoint, saveCheckpoint } from "./checkpoint.js";
import { restoreCheckpointFile } from "./checkpoint-files.js";
import { recallBatch } from "./data/recall-task.js";
import { Trainer, type ZeroStage } from "./train-step.js";

const config: GptConfig = { vocab: 32, hidden: 16, heads: 4, kvHeads: 2, layers: 2, mlp: "gelu", mlpRatio: 2, maxSeq: 64, tiedHead: true };
const task = { seq: 22, keys: 3, values: 4, vocab: 32 };

/** `sp` trainers of one local world at `zero`, each after `steps` steps on the same batches. */
async function trainers(sp: number, zero: ZeroStage, steps: number): Promise<Trainer[]> {
  const ops = new ReferenceOps();
  return Promise.all(
    createLocalGroups(sp).map(async (world) => {
      const dims = await ParallelDims.create(world, { sp, attention: "ulysses" }, { heads: config.heads, kvHeads: config.kvHeads, seqLength: task.seq });
      const shard = zero === 3 ? { shardOver: { rank: world.rank, ranks: world.size } } : {};
      const model = new Gpt(config, { ops, localAttention: new ReferenceAttention(), seed: 7, ...shard });
      const trainer = new Trainer(parallelize(model, dims), { ops, gradClip: 1, adamw: { weightDecay: 0.1 }, zero });
      const data = new Rng(99, 1);
      for (let step = 0; step < steps; step++)
        await trainer.trainStep(
          recallBatch(task, 2, () => data.uniform()),
          1e-2,
        );
      return trainer;
    }),
  );
}

async function save(all: Trainer[], file: string): Promise<void> {
  await Promise.all(all.map((t, rank) => saveCheckpoint(file, t, { settings: { zero: 2 } }, rank === 0)));
}

const floats = (file: string, name: string) => readSafetensors(file).tensors.get(name)!.data as Float32Array;

describe("checkpoints shard by shard", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sharded-checkpoint-"));

  it("under ZeRO-2 at SP 4 the file's moments are the ranks' slices back to back, and its weights every rank's, bit for bit", async () => {
    const all = await trainers(4, 2, 3);
    const file = path.join(dir, "zero2.safetensors");
    await save(all, file);
    for (const which of ["m", "v"] as const) {
      const slices = all.map((t) => t.optimizer[which]);
      expect(slices.map((s) => s.length)).toEqual(all[0]!.sliceSizes);
      const whole = new Float32Array(slices.reduce((n, s) => n + s.length, 0));
      let at = 0;
      for (const s of slices) {
        whole.set(s, at);
        at += s.length;
      }
      expect([...floats(file, `optimizer.${which}`)]).toEqual([...whole]);
      expect(whole.some((x) => x !== 0)).toBe(true);
    }
    const weights = readSafetensors(file).tensors;
    for (const spec of all[0]!.model.params.specs)
      expect([...(weights.get(spec.name)!.data as Float32Array)]).toEqual([...all[2]!.model.params.value(spec.name).data]);
    expect(inspectCheckpoint(file).step).toBe(3);
  });

  it("restores at other stages and degrees: each rank reads its slice of each moment and all of the weights", async () => {
    const file = path.join(dir, "zero2-sp4.safetensors");
    await save(await trainers(4, 2, 3), file);
    const m = floats(file, "optimizer.m");
    const v = floats(file, "optimizer.v");
    const weights = new Map([...readSafetensors(file).tensors].filter(([name]) => !name.startsWith("optimizer.")));
    for (const [sp, zero] of [
      [2, 1],
      [1, 0],
      [4, 2],
      [4, 3],
      [2, 3],
    ] as const) {
      const fresh = await trainers(sp, zero, 0);
      for (const t of fresh) {
        const info = restoreCheckpointFile(t, file);
        expect(info.step).toBe(3);
        expect(t.step).toBe(3);
        const { offset, length } = t.optimizer;
        expect(length).toBe(zero === 0 ? m.length : t.sliceSizes[t.group!.rank]);
        expect([...t.optimizer.m]).toEqual([...m.subarray(offset, offset + length)]);
        expect([...t.optimizer.v]).toEqual([...v.subarray(offset, offset + length)]);
        const { params } = t.model;
        if (!params.sharded) {
          for (const [name, tensor] of weights) expect([...params.value(name).data], name).toEqual([...(tensor.data as Float32Array)]);
          continue;
        }
        // ZeRO-3: the slice of the file's flat weights, and nothing else
        const flat = new Float32Array(params.size);
        for (const [name, tensor] of weights) flat.set(tensor.data as Float32Array, params.slots.get(name)!.offset);
        expect(params.owned.length).toBe(t.sliceSizes[t.group!.rank]);
        expect([...params.owned]).toEqual([...flat.subarray(offset, offset + length)]);
      }
    }
  });

  it("under ZeRO-3 at SP 4 the file, weights streamed from the ranks holding them, is ZeRO-2's bit for bit", async () => {
    const zero2 = path.join(dir, "zero2-for-3.safetensors");
    const zero3 = path.join(dir, "zero3.safetensors");
    await save(await trainers(4, 2, 3), zero2);
    const sharded = await trainers(4, 3, 3);
    expect(sharded[1]!.model.params.sharded).toBe(true);
    await save(sharded, zero3);
    expect(fs.readFileSync(zero3).equals(fs.readFileSync(zero2))).toBe(true);
  });

  it("refuses a file of another model or without moments before reading a tensor, naming the file", async () => {
    const [trainer] = await trainers(1, 0, 0);
    const other = path.join(dir, "other.safetensors");
    const ops = new ReferenceOps();
    const small = new Trainer(new Gpt({ ...config, hidden: 8 }, { ops, localAttention: new ReferenceAttention(), seed: 1 }), {
      ops,
      gradClip: 1,
      adamw: {},
      zero: 0,
    });
    await saveCheckpoint(other, small, {}, true);
    const before = [...trainer!.model.params.values];
    expect(() => restoreCheckpointFile(trainer!, other)).toThrow(new RegExp(`checkpoint '${other.replaceAll("/", "\\/")}' was written for model .*"hidden":8`));
    const weightsOnly = path.join(dir, "weights-only.safetensors");
    const tensors = new Map<string, Tensor>();
    for (const spec of trainer!.model.params.specs) tensors.set(spec.name, trainer!.model.params.value(spec.name));
    writeSafetensors(weightsOnly, tensors, { format: "ulysses-ts-checkpoint/1", step: "1", config: JSON.stringify(config) });
    expect(() => restoreCheckpointFile(trainer!, weightsOnly)).toThrow(/has no optimizer state; it cannot resume training/);
    expect([...trainer!.model.params.values]).toEqual(before);
  });
});
