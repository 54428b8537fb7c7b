/**
 * Command-line parsing: `--flag value`, `--flag=value`, boolean switches
 * (`--zero1`, `--no-export`), `--config file.json` (the same keys, camelCase
 * or kebab-case; flags given on the command line win), `--help` and
 * `--version`. It turns text into a TrainConfig; `config.ts` validates the
 * values. `resumeSettings` layers a checkpoint under the flags on --resume:
 * plain data only, never code or paths.
 */
import { BYTE_VOCAB, type CheckpointInfo, recallMinVocab } from "@ulysses/training";
import { DEFAULTS, MODEL_SHAPE_KEYS, NEVER_FROM_CHECKPOINT, camel, dataDigest, kebab, usesDocuments, type TrainConfig } from "./config.js";
import { EXIT_CODES_HELP } from "./entry-point.js";
import { TrainerError } from "./errors.js";
import { MAX_CONFIG_FILE_BYTES, readRegularFile } from "./input-files.js";
import { dataStateProblem, exportTablesProblem } from "./resume-bounds.js";

const HELP: Record<keyof TrainConfig, string> = {
  sp: "sequence-parallel degree: ranks sharing one sequence",
  dp: "data-parallel degree: SP groups training on different batches",
  backend: "collectives backend: threads | local (all ranks in one thread) | mpi (run under mpirun) | path to a backend module",
  task: "recall (built-in synthetic long-range key-value recall: facts in the first quarter of each sequence, queries in the last) | text (needs --data)",
  data: "text data for byte-level language modelling (implies --task text): a file, or a folder of .txt files (see Text data below)",
  dataFormat: "auto (a folder: txt-dir, *.jsonl: jsonl, else text) | text | jsonl | txt-dir",
  docSeparator: "plain text: the string between documents, e.g. '\\n\\n' (\\n \\r \\t \\\\ are escapes); without it a text file is one stream",
  longDocuments: "documents longer than --seq + 1 tokens: split (each row's piece is its own document) | continue (one document across rows)",
  skipBadDocuments: 'skip bad documents (invalid JSON, no string "text", empty, not UTF-8) and count them, instead of failing with the file and line',
  seq: "global sequence length in tokens",
  layers: "transformer blocks",
  hidden: "model width",
  heads: "attention heads",
  kvHeads: "key/value heads (grouped-query attention when fewer than --heads)",
  mlp: "gelu | swiglu",
  mlpRatio: "MLP width as a multiple of --hidden",
  tiedHead: "tie the LM head to the token embedding",
  attention:
    "ulysses (all-to-all over heads) | ring (K and V passed around the ranks: any SP degree, past the head count) | hybrid (Ulysses in groups of --ulysses-degree ranks, ring across them) | allgather (all-gather K and V, the baseline); see 'Which scheme' in the README",
  ulyssesDegree: "hybrid attention: ranks per Ulysses group, u (default --sp / --ring-degree, or gcd(--sp, --kv-heads))",
  ringDegree: "hybrid attention: Ulysses groups around the ring, r = --sp / u",
  sequenceLayout: "auto (zigzag when a ring runs, which balances causal attention over the ranks; else contiguous) | contiguous | zigzag",
  ulyssesHeadGroups:
    "Ulysses: pipeline its all-to-alls against the attention kernel over this many head groups (1: off; slower on a CPU, where the exchange copies use the same cores)",
  batch: "sequences per step per data-parallel group",
  steps: "training steps (total, including resumed ones)",
  lr: "peak learning rate",
  minLr: "learning rate at the end of the cosine decay (at most --lr)",
  warmup: "linear warmup steps",
  weightDecay: "AdamW decoupled weight decay (matrices only; from 0 to 1)",
  gradClip: "clip the global gradient norm to this (0: off)",
  seed: "seed for weights and data",
  keys: "recall task: keys per sequence's table (each a group of --values answer tokens)",
  values: "recall task: values a key may hold (without the other shard's facts the best accuracy is 1 / values)",
  vocab: "recall task: vocabulary size; the tokens past the answers and queries are fillers (default keys x (values + 1) + 1)",
  out: "run directory (default runs/<timestamp>, linked as runs/latest; with --resume: the resumed run's directory); an existing run or non-empty directory is refused without --overwrite",
  resume:
    "checkpoint file or run directory to continue from, writing into that directory (or --out). The model shape (--hidden, --layers, --heads, --kv-heads, --mlp, --mlp-ratio, --tied-head, --attention, recall --vocab) comes from the checkpoint: leave those flags out or give the same values; other settings default to the checkpoint's recorded ones; --backend, --data and --out are never taken from a checkpoint",
  overwrite: "let --out name an existing run or a non-empty directory (replaces the run's files there)",
  timeout: "seconds a rank waits for a peer's collective, or for a stuck peer to finish a step, before the run fails naming that rank (from 1 to 2147483)",
  skipMemoryCheck:
    "skip the memory preflight (by default a run whose estimated peak memory exceeds the cgroup limit or the free memory is refused before any rank starts)",
  checkpointEvery: "steps between checkpoints (0: only at the end)",
  activationCheckpointing: "recompute block activations in backward to save memory (only each block's input is kept)",
  tileMlp:
    "tiled MLP: run each block's MLP over tiles of this many tokens in forward and backward, so its 4x-wide activations exist for one tile only (0: off; auto, the default: tiles of at most 8 MiB, only where a rank's untiled MLP buffer is larger; the run header names the rows)",
  tileLoss:
    "tiled loss: run the LM head, softmax and cross-entropy over tiles of this many tokens, so [tokens, vocab] logits never exist (0: off; auto, the default: tiles of at most 4 MiB of logits, only where a rank's untiled logits are larger; the run header names the rows)",
  tileAttention:
    "attention in head groups: each block's q, k, v projections, attention and output projection run over this many groups of heads in forward and backward (recomputed per group), so their buffers exist for heads/groups heads at a time; must divide --heads and --kv-heads (1: off; auto: the most groups the layout allows, e.g. 8 heads: 8 at SP 1, 4 at SP 2 with Ulysses; the run header names the groups)",
  memoryArena:
    "auto (the default): ONNX Runtime's CPU arenas and glibc's heap, unless the memory account says the run would then not fit, as --no-memory-arena; --memory-arena: always; --no-memory-arena: arenas off, freed large buffers back to the OS and V8 collecting freed tensors after every 16 MiB of op outputs per rank (the least memory; several times slower for small models here, where every large buffer is fresh pages); the run header names the choice; =auto in a config file: \"auto\", true or false",
  zero1: "shard optimizer state over the ranks (ZeRO stage 1)",
  logEvery: "steps between log lines when not on a terminal",
  export: "export model.onnx at the end (--no-export to skip)",
  threads: "ONNX Runtime threads per rank, at most 4 x the machine's cores (default max(1, floor(cores / ranks)))",
  kernel:
    "local attention kernel: fused (the C++ ONNX Runtime custom op of @ulysses/native-ops, the faster one in pnpm bench:kernels) | ort (ONNX graphs) | auto (fused when its native addon is built, else ort; the run header names the one used)",
};

export function helpText(): string {
  const lines = [
    "Usage: ulysses-train [flags]         (pnpm train [flags] from the repository root)",
    "",
    "Trains a small GPT with Ulysses sequence parallelism. Flags may also come",
    "from --config file.json with the same keys (camelCase or kebab-case).",
    "",
  ];
  for (const key of Object.keys(HELP) as (keyof TrainConfig)[]) {
    const value = DEFAULTS[key];
    const flag = SWITCH_OR_AUTO.has(key)
      ? `--[no-]${kebab(key)}[=auto]`
      : typeof value === "boolean"
        ? `--${kebab(key)}`
        : `--${kebab(key)} <${typeof value === "number" || NULLABLE_NUMBERS.has(key) ? "n" : "value"}>`;
    const shown = value === null ? "" : ` (default ${String(value)})`;
    lines.push(...flagLines(flag, `${HELP[key]}${shown}`));
  }
  lines.push(
    "  --config <file.json>               read settings from a JSON file",
    "  -h, --help                         show this text",
    "  -V, --version                      print the version",
    "",
  );
  const item = (name: string, text: string) => wrapWords(text, HELP_COLUMNS - 11).map((line, i) => `  ${(i === 0 ? name : "").padEnd(8)} ${line}`);
  const paragraph = (text: string) => wrapWords(text, HELP_COLUMNS - 2).map((line) => `  ${line}`);
  lines.push(
    "Text data (--task text, byte-level: a token is a UTF-8 byte, vocab 256):",
    ...item(
      "text",
      "one file: random windows of --seq + 1 bytes, as one stream; with --doc-separator, the pieces between separators are documents (a separator at the very end closes the last one)",
    ),
    ...item("jsonl", 'one {"text": "..."} object per line (other keys ignored, blank lines skipped)'),
    ...item("txt-dir", "a folder: each .txt file is one document, in name order (other files and subfolders ignored)"),
    ...paragraph(
      'Documents are shuffled (a buffer of 64, drawn with the --seed data RNG), packed into rows of --seq tokens (a document\'s last token predicts nothing; a document that does not fit starts the next row, the rest is padding), read in chunks (the corpus may be larger than memory) and start over at the end. A bad document (invalid JSON, "text" missing or not a string, empty, not UTF-8) stops the run naming the file and the line (JSONL) or document; --skip-bad-documents skips and counts them. The first 64 MiB are checked before the ranks start. metrics.jsonl, the progress line and summary.txt then report documents and padding per step.',
    ),
    "",
  );
  lines.push(
    ...wrapWords("Outputs in the run directory: config.json, metrics.jsonl, loss.svg, checkpoint.safetensors, model.onnx, summary.txt.", HELP_COLUMNS),
    "",
    EXIT_CODES_HELP,
  );
  return lines.join("\n");
}

/** The widest line of --help. */
export const HELP_COLUMNS = 100;

/** Words of `text` in lines of at most `width` columns (a longer word gets a line of its own). */
export function wrapWords(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = "";
  for (const word of text.split(/\s+/).filter((w) => w !== "")) {
    if (line !== "" && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else line = line === "" ? word : `${line} ${word}`;
  }
  if (line !== "") lines.push(line);
  return lines;
}

/** One flag's help: the flag in a 34-column field, its description wrapped beside it to HELP_COLUMNS. */
function flagLines(flag: string, description: string): string[] {
  const indent = " ".repeat(37);
  const wrapped = wrapWords(description, HELP_COLUMNS - indent.length);
  if (flag.length > 34) return [`  ${flag}`, ...wrapped.map((line) => `${indent}${line}`)];
  return wrapped.map((line, i) => (i === 0 ? `  ${flag.padEnd(34)} ${line}` : `${indent}${line}`));
}

/** Numeric settings whose default is null (computed when the run starts). */
const NULLABLE_NUMBERS: ReadonlySet<keyof TrainConfig> = new Set(["threads", "ulyssesDegree", "ringDegree", "vocab"]);

/** On/off switches whose default is auto: `--flag` (on), `--no-flag` (off), `--flag=auto`. */
const SWITCH_OR_AUTO: ReadonlySet<keyof TrainConfig> = new Set(["memoryArena"]);

/** Rows per tile, 0 (off) or auto. */
const TILE_SETTINGS: ReadonlySet<keyof TrainConfig> = new Set(["tileMlp", "tileLoss", "tileAttention"]);

export type ParseResult =
  | { help: true }
  | { help: false; version: true }
  | { help: false; version?: false; config: TrainConfig /** Keys set on the command line or in the config file. */; explicit: Set<keyof TrainConfig> };

/** A number in decimal notation: 12, -3, 0.5, .5, 3e-4 (no hex, binary, octal, Infinity or NaN). */
export const DECIMAL = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;

/** The setting a name stands for, when it is one: own keys of DEFAULTS only (never toString, constructor, __proto__ ...). */
export function settingOf(name: string): keyof TrainConfig | null {
  const key = camel(name);
  return Object.hasOwn(DEFAULTS, key) ? (key as keyof TrainConfig) : null;
}

/** Converts one raw value to the type of `key`'s default. */
export function coerce(key: keyof TrainConfig, raw: unknown, source: string): unknown {
  const template = DEFAULTS[key];
  if ((TILE_SETTINGS.has(key) || SWITCH_OR_AUTO.has(key)) && raw === "auto") return "auto";
  if (SWITCH_OR_AUTO.has(key)) {
    if (typeof raw === "boolean") return raw;
    if (raw === "true" || raw === "1" || raw === "on") return true;
    if (raw === "false" || raw === "0" || raw === "off") return false;
    throw new TrainerError(`${source}: --${kebab(key)} is on, off or auto, got '${String(raw)}'`);
  }
  const numeric = typeof template === "number" || NULLABLE_NUMBERS.has(key) || TILE_SETTINGS.has(key);
  if (numeric) {
    // decimal notation only: Number() would also take 0x10, 0b1, 0o7 and "Infinity"
    const value = typeof raw === "number" ? raw : typeof raw === "string" && DECIMAL.test(raw.trim()) ? Number(raw) : NaN;
    if (!Number.isFinite(value))
      throw new TrainerError(
        `${source}: --${kebab(key)} needs a number${TILE_SETTINGS.has(key) ? " or auto" : ""}, got '${String(raw)}' (in decimal notation: 12, 0.5, 3e-4)`,
      );
    return value;
  }
  if (typeof template === "boolean") {
    if (typeof raw === "boolean") return raw;
    if (raw === "true" || raw === "1") return true;
    if (raw === "false" || raw === "0") return false;
    throw new TrainerError(`${source}: --${kebab(key)} is true or false, got '${String(raw)}'`);
  }
  if (raw === null) return null;
  if (typeof raw !== "string") throw new TrainerError(`${source}: --${kebab(key)} needs a string, got ${JSON.stringify(raw)}`);
  return raw;
}

function keyOf(name: string, source: string): keyof TrainConfig {
  const key = settingOf(name);
  if (key === null) throw new TrainerError(`${source}: unknown setting '${name}' (see --help)`);
  return key;
}

function readConfigFile(file: string): Partial<TrainConfig> {
  const bytes = readRegularFile(file, MAX_CONFIG_FILE_BYTES, "config file");
  let json: unknown;
  try {
    json = JSON.parse(bytes.toString("utf8"));
  } catch (cause) {
    throw new TrainerError(`config file '${file}' cannot be read as JSON: ${(cause as Error).message}`, { cause });
  }
  if (json === null || typeof json !== "object" || Array.isArray(json)) throw new TrainerError(`config file '${file}' must hold a JSON object`);
  const out: Record<string, unknown> = {};
  for (const [name, raw] of Object.entries(json)) {
    const key = keyOf(name, `config file '${file}'`);
    out[key] = coerce(key, raw, `config file '${file}'`);
  }
  return out as Partial<TrainConfig>;
}

/** Parses argv (without the node and script names). */
export function parseArgs(argv: readonly string[]): ParseResult {
  const fromFlags: Record<string, unknown> = {};
  let configFile: string | null = null;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--help" || arg === "-h") return { help: true };
    if (arg === "--version" || arg === "-V") return { help: false, version: true };
    if (arg === "--") continue;
    if (!arg.startsWith("--")) throw new TrainerError(`unexpected argument '${arg}' (flags start with --; see --help)`);
    const eq = arg.indexOf("=");
    let name = eq >= 0 ? arg.slice(2, eq) : arg.slice(2);
    let value: string | undefined = eq >= 0 ? arg.slice(eq + 1) : undefined;
    if (name === "config") {
      configFile = value ?? argv[++i] ?? null;
      if (configFile === null) throw new TrainerError("--config needs a file name");
      continue;
    }
    let negated = false;
    if (name.startsWith("no-") && settingOf(name) === null) {
      name = name.slice(3);
      negated = true;
    }
    const key = keyOf(name, "command line");
    if (typeof DEFAULTS[key] === "boolean" || SWITCH_OR_AUTO.has(key)) {
      fromFlags[key] = negated ? false : value === undefined ? true : coerce(key, value, "command line");
      continue;
    }
    if (negated) throw new TrainerError(`--no-${name} is only for on/off switches`);
    if (value === undefined) {
      value = argv[++i];
      if (value === undefined) throw new TrainerError(`--${name} needs a value`);
    }
    fromFlags[key] = coerce(key, value, "command line");
  }
  const fromFile = configFile === null ? {} : readConfigFile(configFile);
  const config = { ...DEFAULTS, ...fromFile, ...fromFlags } as TrainConfig;
  if (config.data !== null && !("task" in fromFile) && !("task" in fromFlags)) config.task = "text";
  const explicit = new Set([...Object.keys(fromFile), ...Object.keys(fromFlags)] as (keyof TrainConfig)[]);
  return { help: false, config, explicit };
}

/** What resume needs of a checkpoint (LoadedCheckpoint has it). */
/** What resume reads of a checkpoint's header (its settings are untrusted: anything JSON can hold). */
export type CheckpointFacts = Pick<CheckpointInfo, "file" | "step" | "config" | "settings">;

export interface ResumedSettings {
  config: TrainConfig;
  /** Things to tell the user (settings of the checkpoint that were ignored, a different data file). */
  notes: string[];
}

/** A value from a checkpoint, quoted for a message (bounded, control characters escaped). */
function quoted(value: unknown): string {
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

/**
 * The configuration of a resumed run: the flags given now (`explicit`), then
 * the checkpoint's plain recorded settings (steps, batch, lr, seq, task, ...)
 * for the flags not given, with the model shape taken from the checkpoint's
 * GPT config. Code and paths (NEVER_FROM_CHECKPOINT) come from the command
 * line only; a checkpoint that records them gets a note and nothing else.
 * Conflicts between a flag and the checkpoint (model shape, --vocab, --seq
 * beyond the model's maxSeq, --task, --data, --steps below the step reached)
 * throw a TrainerError naming both values.
 */
export function resumeSettings(given: TrainConfig, explicit: ReadonlySet<keyof TrainConfig>, checkpoint: CheckpointFacts): ResumedSettings {
  const config: TrainConfig = { ...given };
  const notes: string[] = [];
  const conflicts: string[] = [];
  const source = `checkpoint '${checkpoint.file}'`;
  const recorded =
    checkpoint.settings !== null && typeof checkpoint.settings === "object" && !Array.isArray(checkpoint.settings)
      ? (checkpoint.settings as Record<string, unknown>)
      : {};
  const ignored = Object.keys(recorded).filter((key) => (NEVER_FROM_CHECKPOINT as readonly string[]).includes(key) && recorded[key] !== null);
  if (ignored.length > 0) {
    notes.push(
      `${source} records ${ignored.map((k) => `${k} ${quoted(recorded[k])}`).join(", ")}: ignored (a checkpoint never chooses code or paths; they come from this command line)`,
    );
  }
  const shape = new Set<string>([...MODEL_SHAPE_KEYS, "vocab"]);
  // a new --attention (or --sp) given now also resets the recorded hybrid degrees, layout and head groups, which belong to the old scheme
  const layoutKeys = new Set<string>(["ulyssesDegree", "ringDegree", "sequenceLayout", "ulyssesHeadGroups"]);
  const newScheme = explicit.has("attention") || explicit.has("sp");
  for (const [name, raw] of Object.entries(recorded)) {
    const key = name as keyof TrainConfig;
    if (!Object.hasOwn(DEFAULTS, key) || (NEVER_FROM_CHECKPOINT as readonly string[]).includes(key) || shape.has(key) || key === "task" || explicit.has(key))
      continue;
    if (newScheme && layoutKeys.has(key)) continue;
    if (raw === null && DEFAULTS[key] === null) {
      (config as unknown as Record<string, unknown>)[key] = null;
      continue;
    }
    try {
      (config as unknown as Record<string, unknown>)[key] = coerce(key, raw, source);
    } catch (error) {
      conflicts.push(`${(error as Error).message.replace(/ --(\S+) /, " recorded setting '$1' ")}`);
    }
  }
  // the task: a --data given now implies text unless --task says otherwise
  const recordedTask = recorded.task === "recall" || recorded.task === "text" ? recorded.task : null;
  if (recordedTask !== null) {
    if (explicit.has("task") && given.task !== recordedTask) conflicts.push(`--task ${given.task} conflicts with the ${recordedTask} task of ${source}`);
    else config.task = recordedTask;
  }
  if (explicit.has("data") && config.task === "recall") {
    conflicts.push(`--data '${given.data}': ${source} is a recall-task run, which reads no data file (drop --data)`);
  }
  if (config.task === "text" && config.data === null) {
    const size = typeof recorded.dataBytes === "number" ? ` (it was trained on a file of ${recorded.dataBytes} bytes)` : "";
    conflicts.push(`${source} is a text-task run: give the data file with --data FILE${size}; a checkpoint never names the files a run reads`);
  }
  // the model: the checkpoint's GPT config decides; flags may only repeat it
  const gpt = checkpoint.config;
  for (const key of MODEL_SHAPE_KEYS) {
    const value = gpt[key];
    if (explicit.has(key) && given[key] !== value)
      conflicts.push(
        `--${kebab(key)} ${String(given[key])} conflicts with ${source}, whose model has ${kebab(key)} ${String(value)} (leave --${kebab(key)} out to use it)`,
      );
    else (config as unknown as Record<string, unknown>)[key] = value;
  }
  if (config.task === "text") {
    if (gpt.vocab !== BYTE_VOCAB && !(recordedTask === "recall" && explicit.has("task")))
      conflicts.push(`--task text needs a byte-level model (vocab ${BYTE_VOCAB}), but the model of ${source} has vocab ${gpt.vocab}`);
  } else if (explicit.has("vocab") && given.vocab !== gpt.vocab) {
    conflicts.push(`--vocab ${given.vocab} conflicts with ${source}, whose model has vocab ${gpt.vocab} (leave --vocab out to use it)`);
  } else {
    // null (the smallest vocabulary for --keys x --values) stays null where that is the model's: the resumed
    // run records the same settings as an uninterrupted one
    config.vocab = config.vocab === null && recallMinVocab(config.keys, config.values) === gpt.vocab ? null : gpt.vocab;
  }
  if (!explicit.has("seq") && !("seq" in recorded)) config.seq = gpt.maxSeq;
  if (config.seq > gpt.maxSeq) conflicts.push(`--seq ${config.seq} is beyond the longest sequence the model of ${source} was built for (maxSeq ${gpt.maxSeq})`);
  if (config.steps < checkpoint.step)
    conflicts.push(
      `--steps ${config.steps} is below the step ${checkpoint.step} that ${source} has reached (--steps counts all steps, the resumed ones included)`,
    );
  if (config.task === "text" && config.data !== null && typeof recorded.dataSha256 === "string") {
    try {
      const now = dataDigest(config.data);
      if (now.sha256 !== recorded.dataSha256)
        notes.push(
          `--data '${config.data}' (${now.bytes} bytes) is not the file ${source} was trained on (${quoted(recorded.dataBytes)} bytes, another SHA-256): training continues on the new file`,
        );
      // the same corpus: the ranks will restore the data state, so every size it states is checked now, before anything is written
      else if (usesDocuments(config) && "data" in checkpoint && checkpoint.data !== undefined) {
        const problem = dataStateProblem(config, checkpoint.data);
        if (problem !== null) conflicts.push(`${source}: ${problem}`);
      }
    } catch {
      // an unreadable --data is reported by validateConfig
    }
  }
  // maxSeq sizes one allocation, the ONNX export's RoPE tables: bounded by what the run needs at --seq
  const tables = exportTablesProblem(config, gpt);
  if (tables !== null) conflicts.push(`${source}: ${tables}`);
  if (conflicts.length > 0) throw new TrainerError(`--resume: the command line and the checkpoint disagree:\n  - ${conflicts.join("\n  - ")}`);
  return { config, notes };
}
