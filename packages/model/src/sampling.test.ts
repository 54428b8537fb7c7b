import { describe, expect, it } from "vitest";
import { sampleToken } from "./sampling.js";

describe("sampling", () => {
  it("is greedy at temperature 0 and follows softmax(logits / T) restricted to the top k", async () => {
    expect(sampleToken([0.1, 3, -1], { temperature: 0 }, () => 0.99)).toBe(1);
    // probabilities at T = 1 over logits [0, ln 3]: 1/4, 3/4
    const logits = [0, Math.log(3), -50];
    expect(sampleToken(logits, { temperature: 1 }, () => 0.2)).toBe(1);
    expect(sampleToken(logits, { temperature: 1 }, () => 0.76)).toBe(0);
    expect(sampleToken(logits, { temperature: 1, topK: 1 }, () => 0.99)).toBe(1);
  });
});
