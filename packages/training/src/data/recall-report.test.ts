import { Rng } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { recallReport } from "./recall-report.js";
import { recallBatch, type RecallTaskOptions } from "./recall-task.js";

const task: RecallTaskOptions = { seq: 64, keys: 2, values: 4, vocab: 20 };
const batch = () => {
  const rng = new Rng(9, 1);
  return recallBatch(task, 2, () => rng.uniform());
};

describe("recallReport", () => {
  it("SP 2, contiguous: the facts (tokens [0, 16)) on rank 0, the queries ([48, 64)) on rank 1, so the baseline without facts is 1 / values", () => {
    const report = recallReport(task, { sp: 2, layout: "contiguous", ringDegree: 1 }, batch());
    expect(report.header).toMatch(/facts at tokens \[0, 16\) on rank 0, queries at \[48, 64\) on rank 1 \(no rank holds both\)/);
    expect(report.header).toMatch(/every answer is at least 33 tokens back/);
    expect(report.chance).toBe(1 / 8);
    expect(report.withoutFacts).toBe(1 / 4);
  });

  it("zigzag over 2 ranks puts the first and last chunks on rank 0: facts and queries meet, so no baseline without facts", () => {
    const report = recallReport(task, { sp: 2, layout: "zigzag", ringDegree: 2 }, batch());
    expect(report.header).toMatch(/on rank 0, queries at \[48, 64\) on rank 0 \(some rank holds both\)/);
    expect(report.withoutFacts).toBeNull();
  });

  it("SP 1: one rank holds all", () => {
    expect(recallReport(task, { sp: 1, layout: "contiguous", ringDegree: 1 }, batch()).header).toMatch(/\(one rank holds all\)/);
  });
});
