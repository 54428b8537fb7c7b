/**
 * Scoring an 8K-token text with a Hugging Face model directory (a tiny llama
 * with the real Qwen3 tokenizer): the ids are the tokenizer's own encoding, the
 * perplexity is exp of the mean negative log-probability printed, and SP 2
 * (Ulysses; ring with zigzag shards) gives SP 1's numbers.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";
import { afterAll, describe, expect, it } from "vitest";
import { scoreFile } from "./score.js";
import { QWEN3_TOKENIZER_DIR, tinyLlamaConfig, writeTinyHfModel } from "./testing-fixtures/tiny-hf.js";

process.env.ORT_DISABLE_TELEMETRY = "1";
const root = fs.mkdtempSync(path.join(os.tmpdir(), "ulysses-score-"));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));

describe("ulysses-generate --score", () => {
  it("scores an 8K-token text: the tokenizer's ids, perplexity = exp(mean NLL), SP 2 equal to SP 1", async () => {
    const model = writeTinyHfModel(path.join(root, "model"), tinyLlamaConfig({ max_position_embeddings: 16384 }));
    // about 8K tokens of text that does not repeat
    const text = Array.from({ length: 800 }, (_, i) => `Rank ${i % 7} holds shard ${i} of the sequence.`).join(" ");
    const file = path.join(root, "text.txt");
    fs.writeFileSync(file, text);
    const base = { model, file, backend: "local", threads: 1 } as const;
    const one = await scoreFile({ ...base, sp: 1, attention: "ulysses" });
    const json = JSON.parse(fs.readFileSync(path.join(QWEN3_TOKENIZER_DIR, "tokenizer.json"), "utf8"));
    const config = JSON.parse(fs.readFileSync(path.join(QWEN3_TOKENIZER_DIR, "tokenizer_config.json"), "utf8"));
    expect(one.ids).toEqual(new Tokenizer(json, config).encode(text).ids);
    expect(one.tokens).toBeGreaterThan(8000);
    expect(one.logProbs[0]).toBeNull();
    const scored = one.logProbs.slice(1) as number[];
    expect(scored.length).toBe(one.tokens - 1);
    for (const p of scored) expect(p).toBeLessThan(0);
    const mean = -scored.reduce((s, v) => s + v, 0) / scored.length;
    expect(Math.abs(one.meanNegativeLogProb - mean)).toBeLessThan(1e-9);
    expect(Math.abs(one.perplexity - Math.exp(mean)) / Math.exp(mean)).toBeLessThan(1e-9);
    for (const attention of ["ulysses", "ring"] as const) {
      const two = await scoreFile({ ...base, sp: 2, attention });
      expect(two.ids).toEqual(one.ids);
      scored.forEach((p, i) => expect(Math.abs((two.logProbs[i + 1] as number) - p), `${attention} token ${i + 1}`).toBeLessThan(1e-4));
      expect(Math.abs(two.perplexity - one.perplexity) / one.perplexity).toBeLessThan(1e-4);
    }
  }, 120_000);
});
