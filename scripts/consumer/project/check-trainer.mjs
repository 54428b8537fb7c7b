// Consumer check: the installed `ulysses-train` bin (plain node, no tsx)
// prints its version, trains 20 steps and writes the checkpoint, the metrics
// and model.onnx (every step with a positive MFU); `ulysses-generate` answers
// from that model; `@ulysses/measure`'s MatMul rate runs rounds of at least
// minRoundMs, and with the addon, on its NativeSessionCache (nativeRateCache),
// as the trainer's header says. The memory flags (--tile-mlp, --tile-loss,
// --activation-checkpointing) train the same losses, and
// `@ulysses/trainer/memory` estimates the run from the package.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fusedAttentionStatus, nativeRateCache } from "@ulysses/native-ops";
import { measureMatmulRate } from "@ulysses/measure";

const bin = (name) => path.resolve("node_modules", ".bin", name);
const env = { ...process.env, ORT_DISABLE_TELEMETRY: "1" };
const run = (name, args) => spawnSync(bin(name), args, { encoding: "utf8", env, timeout: 300_000 });

const { version } = JSON.parse(fs.readFileSync(path.resolve("node_modules/@ulysses/trainer/package.json"), "utf8"));
const printed = run("ulysses-train", ["--version"]);
assert.equal(printed.status, 0, printed.stderr);
assert.equal(printed.stdout.trim(), version);

const help = run("ulysses-train", ["--help"]);
assert.equal(help.status, 0, help.stderr);
assert.match(help.stdout, /--sp/);

const bad = run("ulysses-train", ["--no-such-flag"]);
assert.equal(bad.status, 2, `a bad flag exits 2, got ${bad.status}: ${bad.stderr}`);

const out = path.resolve("trained-run");
fs.rmSync(out, { recursive: true, force: true });
const tiny = ["--steps", "20", "--seq", "64", "--hidden", "32", "--heads", "2", "--kv-heads", "2", "--layers", "1", "--batch", "2", "--threads", "1"];
const trained = run("ulysses-train", [...tiny, "--out", out]);
assert.equal(trained.status, 0, `ulysses-train failed (${trained.status}):\n${trained.stdout}\n${trained.stderr}`);
// the addon was built at install, so the graphs ran through it (NativeSessionCache) with the fused kernel, and on an AVX2 or AVX-512
// processor GELU, LayerNorm and rope ran as its native kernels (FusedOps)
assert.match(trained.stdout, /kernels: OrtOps \(graphs run by the addon\).*FusedAttention/);
const addon = fusedAttentionStatus();
if (addon.available && addon.info.cpuIsa !== "portable")
  assert.match(trained.stdout, /kernels: OrtOps \(graphs run by the addon\) \+ native GELU, LayerNorm, rope and cross-entropy \+/);
// the MFU's MatMul rate: ONNX Runtime's kernel on the addon's path, not onnxruntime-node's (whose output copies count)
assert.match(
  trained.stdout,
  addon.available ? /ORT MatMul rate [\d.]+ GFLOP\/s \(on the addon's path\)/ : /ORT MatMul rate [\d.]+ GFLOP\/s \(through onnxruntime-node/,
);
for (const file of ["checkpoint.safetensors", "metrics.jsonl", "model.onnx", "config.json"]) {
  assert.ok(fs.statSync(path.join(out, file)).size > 0, `${file} is missing or empty`);
}
const rows = fs
  .readFileSync(path.join(out, "metrics.jsonl"), "utf8")
  .trim()
  .split("\n")
  .map((line) => JSON.parse(line));
assert.deepEqual(
  rows.map((r) => r.step),
  Array.from({ length: 20 }, (_, i) => i + 1),
);
assert.ok(
  rows.every((r) => Number.isFinite(r.loss) && !Number.isNaN(Date.parse(r.time))),
  "every metrics row has a finite loss and an ISO time",
);
// the MFU is against the MatMul rate the installed @ulysses/measure found at start-up
assert.ok(
  rows.every((r) => Number.isFinite(r.mfu) && r.mfu > 0),
  `every metrics row has a positive MFU, got ${rows.map((r) => r.mfu).join(", ")}`,
);

// @ulysses/measure as installed: rounds of at least minRoundMs (2 rounds of 50 ms: at least 100 ms), a positive rate
const rateStarted = performance.now();
const rate = await measureMatmulRate({ threads: 1, size: 64, rounds: 2, minRoundMs: 50 });
const rateMs = performance.now() - rateStarted;
assert.ok(Number.isFinite(rate) && rate > 0, `measureMatmulRate: a positive rate, got ${rate}`);
assert.ok(rateMs >= 100, `measureMatmulRate: 2 rounds of at least 50 ms took ${rateMs.toFixed(1)} ms`);
if (addon.available) {
  // on the installed addon's cache: the first run plans the graph through onnxruntime-node, the other 5 run natively, each after
  // the first on the output the run before gave back
  let made;
  let recycled = 0;
  const native = await measureMatmulRate({
    threads: 1,
    size: 64,
    rounds: 2,
    repeats: 2,
    minRoundMs: 0,
    cache: (settings) => {
      const given = nativeRateCache(settings);
      made = given.cache;
      const recycle = (output) => {
        recycled++;
        given.recycle(output);
      };
      return { cache: given.cache, recycle };
    },
  });
  assert.ok(Number.isFinite(native) && native > 0, `measureMatmulRate on nativeRateCache: a positive rate, got ${native}`);
  assert.deepEqual(
    [made.nativeRuns, made.outputs.reused, recycled],
    [5, 4, 6],
    "measureMatmulRate on nativeRateCache: 5 native runs, 4 reused outputs, 6 recycled",
  );
}

// the memory modes, as installed: the same 20 losses as the plain run
const leanOut = path.resolve("trained-run-lean");
fs.rmSync(leanOut, { recursive: true, force: true });
const lean = run("ulysses-train", [...tiny, "--out", leanOut, "--tile-mlp", "24", "--tile-loss", "40", "--activation-checkpointing", "--zero", "3"]);
assert.equal(lean.status, 0, `ulysses-train with the memory flags failed (${lean.status}):\n${lean.stdout}\n${lean.stderr}`);
assert.match(
  lean.stdout,
  /memory: activation checkpointing.*MLP in tiles of 24 tokens.*loss in tiles of 40 tokens.*ZeRO-3 over 2 ranks \(weights, gradients and AdamW moments sharded\)/,
);
// ZeRO-3's exports read the checkpoint (no rank holds the weights whole): both written
for (const file of ["model.onnx", path.join("hf", "model.safetensors")]) assert.ok(fs.existsSync(path.join(leanOut, file)), `--zero 3 wrote no ${file}`);
/** Each step's loss in a run directory's metrics.jsonl. */
const lossesOf = (dir) =>
  fs
    .readFileSync(path.join(dir, "metrics.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((line) => JSON.parse(line).loss);
const leanLosses = lossesOf(leanOut);
rows.forEach((r, i) => assert.ok(Math.abs(leanLosses[i] - r.loss) <= 1e-5 * Math.abs(r.loss), `step ${i + 1}: lean loss ${leanLosses[i]} vs ${r.loss}`));
// --precision bf16 (the slices' gradients and the kept block inputs in bf16): the plain run's curve within 1e-3
const bf16Out = path.resolve("trained-run-bf16");
fs.rmSync(bf16Out, { recursive: true, force: true });
const bf16 = run("ulysses-train", [...tiny, "--out", bf16Out, "--no-export", "--activation-checkpointing", "--zero", "2", "--precision", "bf16"]);
assert.equal(bf16.status, 0, `ulysses-train --precision bf16 failed (${bf16.status}):\n${bf16.stdout}\n${bf16.stderr}`);
assert.match(bf16.stdout, /memory: activation checkpointing \(each block keeps its input only, in bf16\).*the gradient slices stored in bf16/);
const bf16Losses = lossesOf(bf16Out);
rows.forEach((r, i) => assert.ok(Math.abs(bf16Losses[i] - r.loss) <= 1e-3 * Math.abs(r.loss), `step ${i + 1}: bf16 loss ${bf16Losses[i]} vs ${r.loss}`));
const { DEFAULTS, estimateMemory } = await import("@ulysses/trainer/memory");
const estimate = estimateMemory({ ...DEFAULTS, seq: 4096, tileMlp: 1024, tileLoss: 1024 });
assert.ok(estimate.bytes > 0 && estimate.terms.some((t) => t.name.includes("loss tile")), "estimateMemory counts the loss tile");

const generated = run("ulysses-generate", ["--from", path.join(out, "model.onnx")]);
assert.equal(generated.status, 0, `ulysses-generate failed (${generated.status}):\n${generated.stderr}`);
assert.match(generated.stdout, /recall: \d+\/\d+ correct/);
console.log(
  `trainer: ulysses-train ${version} trained 20 steps (loss ${rows[0].loss.toFixed(3)} -> ${rows.at(-1).loss.toFixed(3)}), wrote checkpoint, metrics and model.onnx; ulysses-generate answered from it; --tile-mlp/--tile-loss/--activation-checkpointing/--zero 3 gave the same losses (and exported), --precision bf16 within 1e-3; @ulysses/trainer/memory imports`,
);
