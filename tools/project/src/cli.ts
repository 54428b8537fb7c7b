/**
 * `pnpm project`: projects Ulysses, ring attention, their hybrid and
 * Megatron-style sequence parallelism to cluster scale from a hardware
 * profile and writes markdown tables, JSON and SVG charts (throughput per
 * device against sequence length, 8K to 1M tokens, for 1.2B, 7B and 30B GPTs
 * on 32 and 64 devices), the (u, r) split a hybrid would use, and the
 * comparison with the DeepSpeed-Ulysses blog. `--check-schemes FILE` instead
 * checks the schemes' cost against bench:schemes' measured block steps.
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { blogComparisonReport } from "./blog-comparison.js";
import { checkSchemes, parseSchemesFile, profileFromRates, schemesCheckMarkdown } from "./check-schemes.js";
import { parseProfile, ProjectionError, type HardwareProfile } from "./profile.js";
import { runProjection } from "./projection-report.js";
import type { RingLayout } from "./sp-cost.js";

export { PAPER_MODELS, SEQUENCE_LENGTHS, fullDegree, runProjection } from "./projection-report.js";

process.env.ORT_DISABLE_TELEMETRY = "1";

const HELP = `Usage: pnpm project [options]

Projects one training step of a GPT under Ulysses, ring attention, their
hybrid (Ulysses inside u ranks, ring across r groups) and Megatron-style
sequence parallelism from a hardware profile, and compares the A100 projection
with the DeepSpeed-Ulysses blog (see tools/project/README.md).

Options:
  --profile FILE     hardware profile JSON (default profiles/a100-40gb-nvlink-ib.json)
  --out DIR          output folder (default bench-results/project)
  --devices LIST     device counts, comma-separated (default 32,64)
  --zero-ulysses N   ZeRO stage for Ulysses, ring and hybrid (default 3)
  --zero-megatron N  ZeRO stage for Megatron (default 1)
  --global-batch-tokens N  tokens per optimizer step (default 4194304)
  --layout L         causal layout of ring and hybrid: zigzag (default) or contiguous
  --compare-profile FILE  also compare the blog's charts under this profile
                     (repeatable; default, when --profile is not given:
                     profiles/a100-40gb-nvlink-ib-fa-triton.json, the kernel
                     the DeepSpeed team's scripts select)
  --check-schemes FILE  instead of the projection: predict bench:schemes' rows
                     (bench-results/schemes/schemes.json: one block's forward +
                     backward per row) with the profile FILE carries (or
                     --profile, which replaces it), or one built from FILE's
                     measured rates (--profile then supplies what they do
                     not measure: fixed costs, memory), and report the error
                     per row; writes check-schemes.md and check-schemes.json
  --help             this text
`;

export interface Options {
  profile: string;
  /** Whether --profile was given (the schemes check prefers the file's own profile otherwise). */
  profileGiven: boolean;
  out: string;
  devices: number[];
  zeroUlysses: 0 | 1 | 2 | 3;
  zeroMegatron: 0 | 1 | 2 | 3;
  globalBatchTokens: number;
  layout: RingLayout;
  /** Profiles under which the blog comparison is repeated. */
  compareProfiles: string[];
  checkSchemes?: string;
}

const FLAGS = {
  profile: { type: "string" },
  out: { type: "string" },
  devices: { type: "string" },
  "zero-ulysses": { type: "string" },
  "zero-megatron": { type: "string" },
  "global-batch-tokens": { type: "string" },
  layout: { type: "string" },
  "compare-profile": { type: "string", multiple: true },
  "check-schemes": { type: "string" },
  help: { type: "boolean", short: "h" },
} as const;

/**
 * The options of a command line (without node and the script; the `--` pnpm
 * may pass through is skipped), or undefined for --help. Throws a
 * ProjectionError naming the flag and its value.
 */
export function parseOptions(argv: readonly string[]): Options | undefined {
  let values: ReturnType<typeof parseArgs<{ args: string[]; options: typeof FLAGS; strict: true; allowPositionals: false }>>["values"];
  try {
    ({ values } = parseArgs({ args: argv.filter((word) => word !== "--"), options: FLAGS, strict: true, allowPositionals: false }));
  } catch (cause) {
    throw new ProjectionError(`${(cause as Error).message} (see --help)`, { cause });
  }
  if (values.help === true) return undefined;
  const from = process.env.INIT_CWD ?? process.cwd();
  const here = path.dirname(fileURLToPath(import.meta.url));
  const stage = (flag: string, raw: string | undefined, fallback: 0 | 1 | 2 | 3): 0 | 1 | 2 | 3 => {
    if (raw === undefined) return fallback;
    const n = Number(raw);
    if (![0, 1, 2, 3].includes(n) || raw.trim() === "") throw new ProjectionError(`--${flag}: ZeRO stage must be 0, 1, 2 or 3, got '${raw}'`);
    return n as 0 | 1 | 2 | 3;
  };
  let devices = [32, 64];
  if (values.devices !== undefined) {
    devices = values.devices.split(",").map(Number);
    if (devices.some((d) => !Number.isInteger(d) || d < 1)) throw new ProjectionError(`--devices: expected positive integers, got '${values.devices}'`);
  }
  let globalBatchTokens = 4 * 1024 * 1024;
  if (values["global-batch-tokens"] !== undefined) {
    globalBatchTokens = Number(values["global-batch-tokens"]);
    if (!Number.isInteger(globalBatchTokens) || globalBatchTokens < 1)
      throw new ProjectionError(`--global-batch-tokens: expected a positive integer, got '${values["global-batch-tokens"]}'`);
  }
  const layout = values.layout ?? "zigzag";
  if (layout !== "zigzag" && layout !== "contiguous") throw new ProjectionError(`--layout: expected zigzag or contiguous, got '${layout}'`);
  return {
    profile: values.profile === undefined ? path.join(here, "..", "profiles", "a100-40gb-nvlink-ib.json") : path.resolve(from, values.profile),
    profileGiven: values.profile !== undefined,
    out: path.resolve(from, values.out ?? path.join("bench-results", "project")),
    devices,
    zeroUlysses: stage("zero-ulysses", values["zero-ulysses"], 3),
    zeroMegatron: stage("zero-megatron", values["zero-megatron"], 1),
    globalBatchTokens,
    layout,
    compareProfiles:
      values["compare-profile"] !== undefined
        ? values["compare-profile"].map((file) => path.resolve(from, file))
        : values.profile === undefined
          ? [path.join(here, "..", "profiles", "a100-40gb-nvlink-ib-fa-triton.json")]
          : [],
    ...(values["check-schemes"] === undefined ? {} : { checkSchemes: path.resolve(from, values["check-schemes"]) }),
  };
}

function readJson(file: string, what: string): unknown {
  let text: string;
  try {
    text = fs.readFileSync(file, "utf8");
  } catch (cause) {
    throw new ProjectionError(`cannot read ${what} '${file}': ${(cause as Error).message}`, { cause });
  }
  try {
    return JSON.parse(text);
  } catch (cause) {
    throw new ProjectionError(`${what} '${file}' is not JSON: ${(cause as Error).message}`, { cause });
  }
}

export function loadProfile(file: string): HardwareProfile {
  return parseProfile(readJson(file, "profile"), file);
}

/** The schemes check of --check-schemes: the file's profile unless --profile was given. */
export function runSchemesCheck(options: Options): { markdown: string; json: unknown } {
  const file = options.checkSchemes!;
  const parsed = parseSchemesFile(readJson(file, "schemes file"), file);
  const given = options.profileGiven ? loadProfile(options.profile) : undefined;
  let profile: HardwareProfile;
  if (parsed.profile !== undefined) profile = given ?? parsed.profile;
  else if (parsed.rates !== undefined) profile = profileFromRates(parsed.rates, Math.max(...parsed.rows.map((r) => r.P)), given, `${file} rates`);
  else if (given !== undefined) profile = given;
  else throw new ProjectionError(`${file} carries no profile (neither 'profile', profile keys beside 'rows', nor 'rates'): pass the machine's with --profile`);
  const rows = checkSchemes(parsed.rows, profile, parsed.cores === undefined ? {} : { cores: parsed.cores });
  return { markdown: schemesCheckMarkdown(rows, profile), json: { profile, rows } };
}

function main(): void {
  let options: Options | undefined;
  try {
    options = parseOptions(process.argv.slice(2));
  } catch (error) {
    process.stderr.write(`project: ${(error as Error).message}\n`);
    process.exit(2);
  }
  if (!options) {
    process.stdout.write(HELP);
    return;
  }
  fs.mkdirSync(options.out, { recursive: true });
  if (options.checkSchemes !== undefined) {
    const check = runSchemesCheck(options);
    fs.writeFileSync(path.join(options.out, "check-schemes.md"), check.markdown);
    fs.writeFileSync(path.join(options.out, "check-schemes.json"), JSON.stringify(check.json, null, 2));
    process.stdout.write(`${check.markdown}\n\nwrote ${options.out}\n`);
    return;
  }
  const hw = loadProfile(options.profile);
  const result = runProjection(hw, options);
  const blogs = [hw, ...options.compareProfiles.map(loadProfile)].map(blogComparisonReport);
  const blog = { markdown: blogs.map((b) => b.markdown).join("\n\n"), json: blogs.map((b) => b.json) };
  fs.writeFileSync(path.join(options.out, "projection.md"), result.markdown);
  fs.writeFileSync(path.join(options.out, "projection.json"), JSON.stringify(result.json, null, 2));
  fs.writeFileSync(path.join(options.out, "blog-comparison.md"), blog.markdown);
  fs.writeFileSync(path.join(options.out, "blog-comparison.json"), JSON.stringify(blog.json, null, 2));
  for (const [name, svg] of Object.entries(result.charts)) fs.writeFileSync(path.join(options.out, name), svg);
  process.stdout.write(`${result.markdown}\n\n${blog.markdown}\n\nwrote ${options.out}\n`);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  try {
    main();
  } catch (error) {
    process.stderr.write(`project: ${(error as Error).message}\n`);
    process.exit(1);
  }
}
