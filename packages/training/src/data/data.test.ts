import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { Rng } from "@ulysses/tensors";
import { shardBatch } from "@ulysses/parallel";
import { IGNORE_INDEX } from "./batch.js";
import { recallBatch, recallVocabulary } from "./recall-task.js";
import { ByteTextData } from "./text-data.js";

/** A seeded uniform source from the tensors package's Philox generator. */
function seeded(seed: number): () => number {
  const rng = new Rng(seed, 0);
  return () => rng.uniform();
}

describe("recall task", () => {
  const options = { vocab: 64, seq: 100, pairs: 6, queries: 3 };
  const { tokens, labels } = recallBatch(options, 4, seeded(1));
  const v = recallVocabulary(64);

  it("labels only the query keys, with the value that followed that key in the body", () => {
    for (let b = 0; b < 4; b++) {
      const row = [...tokens.data.subarray(b * 100, (b + 1) * 100)];
      const lab = [...labels.data.subarray(b * 100, (b + 1) * 100)];
      const labelled = lab.flatMap((l, i) => (l === IGNORE_INDEX ? [] : [i]));
      expect(labelled).toEqual([92, 95, 98]);
      const body = row.slice(0, 91);
      const keys = body.filter((t) => t >= v.keyStart && t < v.fillerStart);
      expect(keys.length).toBe(6);
      expect(new Set(keys).size).toBe(6);
      for (const i of labelled) {
        expect(row[i - 1]).toBe(v.query);
        const at = body.indexOf(row[i]!);
        expect(at).toBeGreaterThanOrEqual(0);
        expect(lab[i]).toBe(body[at + 1]);
        expect(lab[i]).toBeLessThan(v.values);
      }
      // pairs are spread: one per slot of 15 tokens
      const positions = body.flatMap((t, i) => (t >= v.keyStart && t < v.fillerStart ? [i] : []));
      positions.forEach((p, j) => expect(Math.floor(p / 15)).toBe(j));
    }
  });

  it("is reproducible from the seed and rejects impossible sizes", () => {
    const again = recallBatch(options, 4, seeded(1));
    expect([...again.tokens.data]).toEqual([...tokens.data]);
    expect(() => recallBatch({ ...options, seq: 20 }, 1, seeded(1))).toThrow(/seq 20 is too short for 6 pairs and 3 queries \(needs at least 21\)/);
    expect(() => recallBatch({ ...options, queries: 7 }, 1, seeded(1))).toThrow(/queries must be in \[1, pairs = 6\], got 7/);
  });
});

describe("byte text data and sharding", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "text-"));
  const file = path.join(dir, "t.txt");
  fs.writeFileSync(file, "abcdefghijklmnopqrstuvwxyz");

  it("shifts labels before sharding, so each shard's last label is the next shard's first token", () => {
    const batch = new ByteTextData(file, 11).batch(2, 11, seeded(3));
    for (let b = 0; b < 2; b++) {
      for (let i = 0; i < 11; i++) expect(batch.labels.data[b * 11 + i]).toBe(batch.tokens.data[b * 11 + i]! + 1);
    }
    const shards = [0, 1, 2].map((r) => shardBatch(batch, r, 3));
    expect(shards.map((s) => s.tokens.shape[1])).toEqual([4, 4, 3]);
    expect(shards.map((s) => s.offset)).toEqual([0, 4, 8]);
    for (let b = 0; b < 2; b++) {
      const joined = shards.flatMap((s) => [...s.tokens.data.subarray(b * s.tokens.shape[1]!, (b + 1) * s.tokens.shape[1]!)]);
      expect(joined).toEqual([...batch.tokens.data.subarray(b * 11, (b + 1) * 11)]);
      expect(shards[0]!.labels.data[b * 4 + 3]).toBe(shards[1]!.tokens.data[b * 4]);
      expect(shards[1]!.labels.data[b * 4 + 3]).toBe(shards[2]!.tokens.data[b * 3]);
    }
    expect(() => shardBatch(batch, 0, 12)).toThrow(/11 tokens cannot be split over 12 ranks/);
  });

  it("names the path and sizes of unusable files", () => {
    expect(() => new ByteTextData(path.join(dir, "missing.txt"), 8)).toThrow(/missing.txt.*ENOENT/);
    const empty = path.join(dir, "empty.txt");
    fs.writeFileSync(empty, "");
    expect(() => new ByteTextData(empty, 8)).toThrow(/empty.txt' is empty \(0 bytes\)/);
    expect(() => new ByteTextData(file, 26)).toThrow(/t.txt' has 26 bytes, too short for one sequence of 26 tokens \(needs at least 27\)/);
  });
});
