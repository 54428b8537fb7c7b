/**
 * Bad Hugging Face inputs to both bins, each refused before anything is
 * written, with exit 2 and a message naming the file and the key: an unknown
 * model_type, an unsupported rope_scaling, a missing shard, a wrongly shaped
 * tensor, a missing tokenizer, a chat message without role or content, a
 * --seq or prompt past max_position_embeddings, shape flags beside --model.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { writeSafetensors } from "@ulysses/model";
import { Tensor } from "@ulysses/tensors";
import { main as trainMain } from "./cli.js";
import { main as generateMain } from "./generate.js";
import { captureMain } from "./testing-fixtures/capture.js";
import { QWEN3_TOKENIZER_DIR, tinyLlamaConfig, writeChat, writeTinyHfModel } from "./testing-fixtures/tiny-hf.js";

process.env.ORT_DISABLE_TELEMETRY = "1";
const root = fs.mkdtempSync(path.join(os.tmpdir(), "ulysses-hf-bad-"));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));

const good = writeTinyHfModel(path.join(root, "good"));
const chat = writeChat(path.join(root, "chat.jsonl"), 1, () => ["Hi", "Hello."]);

/** A copy of the good model directory with `change` applied to it. */
function variant(name: string, change: (dir: string) => void): string {
  const dir = path.join(root, name);
  fs.cpSync(good, dir, { recursive: true });
  change(dir);
  return dir;
}

function withConfig(name: string, overrides: Record<string, unknown>): string {
  return variant(name, (dir) => fs.writeFileSync(path.join(dir, "config.json"), JSON.stringify(tinyLlamaConfig(overrides))));
}

const cases: { name: string; bin: "train" | "generate"; argv: () => string[]; says: RegExp }[] = [
  {
    name: "an unknown model_type",
    bin: "train",
    argv: () => ["--model", withConfig("gpt2", { model_type: "gpt2" }), "--data", chat, "--data-format", "chat"],
    says: /config '.*gpt2\/config\.json': model_type "gpt2" is not a model family this library reads/,
  },
  {
    name: "rope_scaling dynamic",
    bin: "train",
    argv: () => ["--model", withConfig("dynamic", { rope_scaling: { rope_type: "dynamic", factor: 4 } }), "--data", chat, "--data-format", "chat"],
    says: /config '.*dynamic\/config\.json': rope_scaling\.rope_type "dynamic" is not supported/,
  },
  {
    name: "a missing shard",
    bin: "train",
    argv: () => [
      "--model",
      variant("shards", (dir) => {
        fs.rmSync(path.join(dir, "model.safetensors"));
        const index = { metadata: {}, weight_map: { "model.embed_tokens.weight": "model-00001-of-00002.safetensors" } };
        fs.writeFileSync(path.join(dir, "model.safetensors.index.json"), JSON.stringify(index));
      }),
      "--data",
      chat,
      "--data-format",
      "chat",
    ],
    says: /could not read safetensors file .*model-00001-of-00002\.safetensors.: no such file or directory/,
  },
  {
    name: "a wrongly shaped tensor",
    bin: "train",
    argv: () => [
      "--model",
      variant("shape", (dir) => writeSafetensors(path.join(dir, "model.safetensors"), { "model.embed_tokens.weight": new Tensor("float32", [3, 32]) })),
      "--data",
      chat,
      "--data-format",
      "chat",
    ],
    says: /model\.safetensors': tensor 'model\.embed_tokens\.weight' has shape \[3, 32\], the config says \[151936, 32\]/,
  },
  {
    name: "a missing tokenizer",
    bin: "train",
    argv: () => ["--model", variant("no-tokenizer", (dir) => fs.rmSync(path.join(dir, "tokenizer.json"))), "--data", chat, "--data-format", "chat"],
    says: /no-tokenizer.*tokenizer\.json/,
  },
  {
    name: "a chat message without content",
    bin: "train",
    argv: () => {
      const bad = path.join(root, "bad-chat.jsonl");
      fs.writeFileSync(bad, `${JSON.stringify({ messages: [{ role: "user" }, { role: "assistant", content: "x" }] })}\n`);
      return ["--model", good, "--data", bad, "--data-format", "chat"];
    },
    says: /bad-chat\.jsonl.*line 1.*content/,
  },
  {
    name: "--seq past max_position_embeddings",
    bin: "train",
    argv: () => ["--model", good, "--data", chat, "--data-format", "chat", "--seq", "8192"],
    says: /--seq 8192 is beyond max_position_embeddings 4096 of '.*good\/config\.json'/,
  },
  {
    name: "a shape flag beside --model",
    bin: "train",
    argv: () => ["--model", good, "--data", chat, "--data-format", "chat", "--hidden", "64"],
    says: /--hidden 64: the model's shape comes from its config\.json/,
  },
  {
    name: "a prompt past max_position_embeddings",
    bin: "generate",
    argv: () => ["--model", withConfig("short", { max_position_embeddings: 4 }), "--prompt", "one two three four five six seven eight"],
    says: /config\.json.*max_position_embeddings/,
  },
];

describe("bad Hugging Face inputs: exit 2 naming the file and key, nothing written", () => {
  for (const c of cases) {
    it(c.name, async () => {
      const out = path.join(root, `out-${c.name.replace(/\W+/g, "-")}`);
      const argv = c.bin === "train" ? [...c.argv(), "--out", out, "--steps", "1"] : c.argv();
      const { code, stderr } = await captureMain(c.bin === "train" ? trainMain : generateMain, argv);
      expect(stderr).toMatch(c.says);
      expect(code, stderr).toBe(2);
      expect(fs.existsSync(out)).toBe(false);
    }, 60_000);
  }
  it("the good directory itself passes these checks (the cases differ from it in one thing each)", () => {
    expect(fs.existsSync(path.join(QWEN3_TOKENIZER_DIR, "tokenizer.json"))).toBe(true);
  });
});
