/**
 * Command-line parsing: `--flag value`, `--flag=value`, boolean switches
 * (`--shared-weights`, `--no-export`), `--config file.json` (the same keys, camelCase
 * or kebab-case; flags given on the command line win), `--help` and
 * `--version`. It turns text into a TrainConfig; `config.ts` validates the
 * values. `resumeSettings` layers a checkpoint under the flags on --resume:
 * plain data only, never code or paths.
 */
import { BYTE_VOCAB, type CheckpointInfo, corpusDigest, recallMinVocab, MAX_CONFIG_FILE_BYTES, readRegularFile } from "@ulysses/training";
import { DEFAULTS, MODEL_SHAPE_KEYS, NEVER_FROM_CHECKPOINT, SETTINGS, camel, kebab, settingKind, usesDocuments, type TrainConfig } from "./config.js";
import { EXIT_CODES_HELP } from "./entry-point.js";
import { TrainerError } from "./errors.js";
import { dataStateProblem, exportTablesProblem } from "./resume-bounds.js";
import { usesHfModel } from "./hf-model.js";

export function helpText(): string {
  const lines = [
    "Usage: ulysses-train [flags]         (pnpm train [flags] from the repository root)",
    "",
    "Trains a small GPT with Ulysses sequence parallelism. Flags may also come",
    "from --config file.json with the same keys (camelCase or kebab-case).",
    "",
  ];
  for (const key of Object.keys(SETTINGS) as (keyof TrainConfig)[]) {
    const value = DEFAULTS[key];
    const kind = settingKind(key);
    const flag =
      kind === "switch-auto"
        ? `--[no-]${kebab(key)}[=auto]`
        : typeof value === "boolean"
          ? `--${kebab(key)}`
          : `--${kebab(key)} <${typeof value === "number" || kind === "number?" ? "n" : "value"}>`;
    const shown = value === null ? "" : ` (default ${String(value)})`;
    lines.push(...flagLines(flag, `${SETTINGS[key].help}${shown}`));
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
  const kind = settingKind(key);
  if ((kind === "tile" || kind === "switch-auto") && raw === "auto") return "auto";
  if (kind === "switch-auto") {
    if (typeof raw === "boolean") return raw;
    if (raw === "true" || raw === "1" || raw === "on") return true;
    if (raw === "false" || raw === "0" || raw === "off") return false;
    throw new TrainerError(`${source}: --${kebab(key)} is on, off or auto, got '${String(raw)}'`);
  }
  const numeric = typeof template === "number" || kind === "number?" || kind === "tile";
  if (numeric) {
    // decimal notation only: Number() would also take 0x10, 0b1, 0o7 and "Infinity"
    const value = typeof raw === "number" ? raw : typeof raw === "string" && DECIMAL.test(raw.trim()) ? Number(raw) : NaN;
    if (!Number.isFinite(value))
      throw new TrainerError(
        `${source}: --${kebab(key)} needs a number${kind === "tile" ? " or auto" : ""}, got '${String(raw)}' (in decimal notation: 12, 0.5, 3e-4)`,
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
    if (typeof DEFAULTS[key] === "boolean" || settingKind(key) === "switch-auto") {
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
  if ((config.data !== null || usesHfModel(config)) && !("task" in fromFile) && !("task" in fromFlags)) config.task = "text";
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
  // a checkpoint from before --zero recorded ZeRO-1 as zero1: true
  if (recorded.zero1 === true && !("zero" in recorded) && !explicit.has("zero")) config.zero = 1;
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
  // the model: the checkpoint's GPT config decides; flags may only repeat it (a Hugging Face model's config.json must describe it: the ranks compare)
  const gpt = checkpoint.config;
  const family = typeof recorded.modelFamily === "string" ? recorded.modelFamily : null;
  if (family !== null && !usesHfModel(config))
    conflicts.push(
      `${source} is a fine-tune of a Hugging Face ${quoted(family)} model: give its --model DIR (or --model-config FILE --tokenizer DIR) again; a checkpoint never names the files a run reads`,
    );
  if (family === null && usesHfModel(config))
    conflicts.push(`${source} is a run of the built-in GPT (${gpt.layers} layers x ${gpt.hidden}): drop --model / --model-config to resume it`);
  for (const key of usesHfModel(config) ? [] : MODEL_SHAPE_KEYS) {
    const value = gpt[key];
    if (explicit.has(key) && given[key] !== value)
      conflicts.push(
        `--${kebab(key)} ${String(given[key])} conflicts with ${source}, whose model has ${kebab(key)} ${String(value)} (leave --${kebab(key)} out to use it)`,
      );
    else (config as unknown as Record<string, unknown>)[key] = value;
  }
  if (usesHfModel(config)) {
    if (explicit.has("vocab")) conflicts.push(`--vocab ${given.vocab}: the vocabulary comes from the model's config.json (drop --vocab)`);
  } else if (config.task === "text") {
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
      const now = corpusDigest(config.data);
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
