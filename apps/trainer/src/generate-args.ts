/**
 * ulysses-generate's command line: its flags (node:util parseArgs, strict),
 * their checks (a bad value is a GenerateFlagError, exit 2) and --help.
 */
import path from "node:path";
import { parseArgs } from "node:util";
import { modelTypes } from "@ulysses/model";
import { sequenceParallelSchemeNames } from "@ulysses/parallel";
import { DECIMAL } from "./args.js";
import { TrainerError } from "./errors.js";

export interface GenerateOptions {
  from: string;
  /** A Hugging Face model directory (--model): read instead of --from (absent or null: --from). */
  model?: string | null;
  prompt: string;
  /** Bytes to generate (byte-level models); null: min(200, what fits in the model's maxSeq after the prompt). */
  tokens: number | null;
  temperature: number;
  topK: number;
  seed: number;
  /** --score FILE: print each token's log-probability and the perplexity of the file's text as JSON instead of generating (needs --model). */
  score?: string | null;
  /** --score's sequence parallelism: ranks, scheme and backend (as ulysses-train's --sp, --attention, --backend). */
  sp?: number;
  attention?: string;
  backend?: string;
}

/** Most tokens one call generates, whatever the model (the model's maxSeq bounds it further). */
export const MAX_TOKENS = 1_000_000;
export const DEFAULT_TOKENS = 200;

export const USAGE = `Usage: ulysses-generate [--from runs/latest | --model DIR] [--prompt TEXT] [--tokens N]
                        [--temperature 0.8] [--top-k 0] [--seed 0]
                        (pnpm generate [flags] from the repository root)
  --from         a run directory, model.onnx or checkpoint.safetensors (default runs/latest)
  --model        a Hugging Face model directory instead: a run's hf/, or a checkpoint of a
                 family this library reads (${modelTypes().join(", ")})
                 with config.json, its safetensors and tokenizer.json; decoded with a key-value
                 cache, stopping at the end-of-sequence token
  --prompt       text to continue (byte-level models: at least one byte; --model: encoded by
                 its tokenizer; default a newline); recall-task models answer a synthetic
                 example instead
  --tokens       bytes (--model: tokens) to generate, streamed as they come: an integer >= 0
                 with prompt + tokens <= the model's maxSeq (max_position_embeddings)
                 (default min(200, what fits))
  --temperature  0 picks the most likely token; > 0 samples (default 0.8)
  --top-k        sample among the k most likely tokens, 0 for all (an integer >= 0)
  --seed         sampling seed (an integer >= 0)
  --score FILE   with --model: score the UTF-8 text of FILE instead of generating: prints JSON
                 with the token ids, each token's log-probability (null for the first) and the
                 perplexity (exp of the mean negative log-probability); the text must fit
                 max_position_embeddings
  --sp N         --score: ranks sharing the sequence (default 1)
  --attention    --score: ulysses | ring | hybrid | allgather, as ulysses-train's (default ulysses)
  --backend      --score: threads | local (default threads)
  -h, --help     show this text
  -V, --version  print the version
Exit codes: 0 done, 1 error (an unreadable or corrupt model file, named), 2 bad flags.`;

const FLAGS = {
  from: { type: "string" },
  model: { type: "string" },
  prompt: { type: "string" },
  tokens: { type: "string" },
  temperature: { type: "string" },
  "top-k": { type: "string" },
  seed: { type: "string" },
  score: { type: "string" },
  sp: { type: "string" },
  attention: { type: "string" },
  backend: { type: "string" },
  help: { type: "boolean", short: "h" },
  version: { type: "boolean", short: "V" },
} as const;

/** A bad flag value (exit 2); other errors (files) exit 1. */
export class GenerateFlagError extends TrainerError {
  constructor(message: string) {
    super(message);
    this.name = "GenerateFlagError";
  }
}

/** The numeric flags, whose value may start with a minus sign ("--seed -1" then reaches the range check). */
const NUMERIC_FLAGS = new Set(["--tokens", "--temperature", "--top-k", "--seed", "--sp"]);

/**
 * argv with `--flag -1` written as `--flag=-1` for the numeric flags, so that
 * a negative number is that flag's value (node:util parseArgs takes a value
 * starting with "-" for a flag and calls it ambiguous) and is refused by its
 * range, naming the flag.
 */
function joinNegativeValues(argv: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const next = argv[i + 1];
    if (NUMERIC_FLAGS.has(argv[i]!) && next !== undefined && /^-[\d.]/.test(next)) {
      out.push(`${argv[i]}=${next}`);
      i++;
    } else out.push(argv[i]!);
  }
  return out;
}

function parseFlags(argv: readonly string[]) {
  try {
    // a leading "--" is what some runners insert before the script's own flags
    const args = joinNegativeValues(argv[0] === "--" ? argv.slice(1) : argv);
    return parseArgs({ args, options: FLAGS, strict: true, allowPositionals: false }).values;
  } catch (cause) {
    throw new GenerateFlagError(`${(cause as Error).message} (see --help)`);
  }
}

/** Parses argv (without the node and script names): options, or "help" / "version". Bad values throw a GenerateFlagError. */
export function parseGenerateArgs(argv: readonly string[]): GenerateOptions | "help" | "version" {
  const values = parseFlags(argv);
  if (values.help) return "help";
  if (values.version) return "version";
  const number = (flag: "tokens" | "temperature" | "top-k" | "seed", kind: "integer" | "number", max: number): number | null => {
    const raw = values[flag];
    if (raw === undefined) return null;
    const n = DECIMAL.test(raw.trim()) ? Number(raw) : NaN;
    const ok = kind === "integer" ? Number.isSafeInteger(n) && n >= 0 && n <= max : Number.isFinite(n) && n >= 0 && n <= max;
    if (!ok) throw new GenerateFlagError(`--${flag} must be ${kind === "integer" ? "an integer" : "a number"} in [0, ${max}], got '${raw}'`);
    return n;
  };
  if (values.from !== undefined && values.from === "")
    throw new GenerateFlagError("--from needs a path (a run directory, model.onnx or checkpoint.safetensors)");
  if (values.model !== undefined && values.model === "") throw new GenerateFlagError("--model needs a path (a Hugging Face model directory)");
  if (values.model !== undefined && values.from !== undefined) throw new GenerateFlagError("give --from or --model, not both");
  if (values.score !== undefined && values.score === "") throw new GenerateFlagError("--score needs a path (a UTF-8 text file)");
  if (values.score !== undefined && values.model === undefined)
    throw new GenerateFlagError("--score needs --model DIR (a Hugging Face model directory with its tokenizer, e.g. a run's hf/)");
  const scoreOnly = ["sp", "attention", "backend"] as const;
  const stray = scoreOnly.filter((flag) => values[flag] !== undefined);
  if (values.score === undefined && stray.length > 0) throw new GenerateFlagError(`${stray.map((f) => `--${f}`).join(", ")}: for --score`);
  const sp = values.sp === undefined ? 1 : DECIMAL.test(values.sp.trim()) ? Number(values.sp) : NaN;
  if (!Number.isSafeInteger(sp) || sp < 1 || sp > 1024) throw new GenerateFlagError(`--sp must be an integer in [1, 1024], got '${values.sp}'`);
  const attention = values.attention ?? "ulysses";
  if (!sequenceParallelSchemeNames().includes(attention))
    throw new GenerateFlagError(`--attention must be ${sequenceParallelSchemeNames().join(", ")}, got '${attention}'`);
  const backend = values.backend ?? "threads";
  if (backend !== "threads" && backend !== "local") throw new GenerateFlagError(`--backend must be threads or local for --score, got '${backend}'`);
  return {
    score: values.score ?? null,
    sp,
    attention,
    backend,
    from: values.from ?? path.join("runs", "latest"),
    model: values.model ?? null,
    prompt: values.prompt ?? "\n",
    tokens: number("tokens", "integer", MAX_TOKENS),
    temperature: number("temperature", "number", 1000) ?? 0.8,
    topK: number("top-k", "integer", Number.MAX_SAFE_INTEGER) ?? 0,
    seed: number("seed", "integer", Number.MAX_SAFE_INTEGER) ?? 0,
  };
}
