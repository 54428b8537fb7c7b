import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { Rng, Tensor } from "@ulysses/tensors";
import { shardBatch } from "@ulysses/parallel";
import { IGNORE_INDEX } from "./batch.js";
import { recallBaselines, recallBatch, recallDistances, recallLayout, recallMinVocab } from "./recall-task.js";
import { ByteTextData } from "./text-data.js";

/** A seeded uniform source from the tensors package's Philox generator. */
function seeded(seed: number): () => number {
  const rng = new Rng(seed, 0);
  return () => rng.uniform();
}

describe("recall task", () => {
  const options = { seq: 100, keys: 6, values: 5, vocab: 40 };
  const { tokens, labels } = recallBatch(options, 4, seeded(1));
  const rowOf = (t: { data: Int32Array }, b: number) => [...t.data.subarray(b * 100, (b + 1) * 100)];

  it("lays facts in the first quarter, fillers between, queries in the last quarter, labelled with their key's fact", () => {
    // vocabulary by hand: answers [0, 30) (key k: [5k, 5k + 5)), queries [30, 36), fillers [36, 40)
    for (let b = 0; b < 4; b++) {
      const row = rowOf(tokens, b);
      const lab = rowOf(labels, b);
      const facts = row.slice(0, 25);
      expect(facts.every((t) => t >= 0 && t < 30)).toBe(true);
      expect(row.slice(25, 75).every((t) => t >= 36 && t < 40)).toBe(true);
      expect(row.slice(75).every((t) => t >= 30 && t < 36)).toBe(true);
      // one value per key within a sequence: the table
      const table = new Map<number, number>();
      for (const t of facts) {
        const key = Math.floor(t / 5);
        expect(table.get(key) ?? t).toBe(t);
        table.set(key, t);
      }
      lab.forEach((l, i) => {
        if (i < 75) expect(l).toBe(IGNORE_INDEX);
        else expect(l).toBe(table.get(row[i]! - 30));
      });
    }
  });

  it("measures each answer's distance to its nearest fact, at least seq - 2 floor(seq / 4) + 1 back", () => {
    expect(recallLayout(2048)).toEqual({ factEnd: 512, queryStart: 1536, minDistance: 1025 });
    expect(recallLayout(100)).toEqual({ factEnd: 25, queryStart: 75, minDistance: 51 });
    const distances = recallDistances({ tokens, labels });
    expect(distances.length).toBe(4 * 25);
    for (let b = 0; b < 4; b++) {
      const row = rowOf(tokens, b);
      for (let q = 0; q < 25; q++) {
        const i = 75 + q;
        const label = rowOf(labels, b)[i]!;
        expect(distances[b * 25 + q]).toBe(i - row.lastIndexOf(label, 24));
        expect(distances[b * 25 + q]).toBeGreaterThanOrEqual(51);
      }
    }
    // a hand-made row: answers 7 at 0 and 2, a query at 5 labelled 7, one at 6 labelled 9 (nowhere before it)
    const hand = { tokens: new Tensor("int32", [1, 7], Int32Array.from([7, 1, 7, 3, 3, 40, 41])), labels: new Tensor("int32", [1, 7]) };
    hand.labels.data.set([IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX, 7, 9]);
    expect(recallDistances(hand)).toEqual([3, -1]);
  });

  it("draws values uniformly (the 1 / values baseline) and asks only keys that have a fact", () => {
    const many = recallBatch({ seq: 16, keys: 3, values: 4, vocab: 16 }, 3000, seeded(5));
    const counts = new Array(12).fill(0);
    for (let b = 0; b < 3000; b++) {
      const facts = new Set(many.tokens.data.subarray(b * 16, b * 16 + 4));
      for (const t of facts) counts[t]++;
      for (let i = 12; i < 16; i++) expect(facts.has(many.labels.data[b * 16 + i]!)).toBe(true);
    }
    // each (key, value) appears in about (1 - (2/3)^4) / 4 of the sequences: 0.2006 x 3000 = 602
    for (const c of counts) expect(Math.abs(c - 602)).toBeLessThan(90);
    expect(recallBaselines({ keys: 8, values: 8 })).toEqual({ chance: 1 / 64, withoutFacts: 1 / 8 });
  });

  it("is reproducible from the seed and rejects impossible sizes", () => {
    const again = recallBatch(options, 4, seeded(1));
    expect([...again.tokens.data]).toEqual([...tokens.data]);
    expect(recallMinVocab(8, 8)).toBe(73);
    expect(() => recallBatch({ ...options, vocab: 36 }, 1, seeded(1))).toThrow(/vocab 36 is too small for 6 keys x 5 values \(needs at least 37/);
    expect(() => recallBatch({ ...options, seq: 3 }, 1, seeded(1))).toThrow(/seq 3 is too short/);
    expect(() => recallBatch({ ...options, values: 1 }, 1, seeded(1))).toThrow(/values must be at least 2/);
    expect(() => recallBatch({ ...options, keys: 0 }, 1, seeded(1))).toThrow(/keys must be a positive integer, got 0/);
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
