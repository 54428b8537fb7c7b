/**
 * The command lines of the bench entry points, read with node:util's
 * `parseArgs` (strict: an unknown flag, a missing value or a stray word is an
 * error; a `--` that pnpm passes through is skipped). `--help` / `-h` prints
 * the usage and exits 0; a bad flag or value prints what is wrong, naming the
 * flag, and exits 2. Also the value readers the entry points share.
 */
import { parseArgs, type ParseArgsConfig } from "node:util";

/** A command line that cannot be run: the message names the flag and the value. */
export class UsageError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "UsageError";
  }
}

export type FlagOptions = NonNullable<ParseArgsConfig["options"]>;
type StrictConfig<O extends FlagOptions> = { args: string[]; options: O; strict: true; allowPositionals: false };
export type FlagValues<O extends FlagOptions> = ReturnType<typeof parseArgs<StrictConfig<O>>>["values"];

/** The values of `argv`'s flags, or null when it asks for --help / -h. Throws a UsageError starting with `command`. */
export function parseFlags<const O extends FlagOptions>(command: string, argv: readonly string[], options: O): FlagValues<O> | null {
  const args = argv.filter((word) => word !== "--");
  if (args.includes("--help") || args.includes("-h")) return null;
  try {
    return parseArgs<StrictConfig<O>>({ args, options, strict: true, allowPositionals: false }).values;
  } catch (cause) {
    throw new UsageError(`${command}: ${(cause as Error).message}`, { cause });
  }
}

/**
 * Runs `read` on `argv`: its result, or (null) the usage printed and exit 0,
 * or (a UsageError) the message and the usage on stderr and exit 2.
 */
export function readCommandLine<T>(usage: string, argv: readonly string[], read: (argv: readonly string[]) => T | null): T {
  let result: T | null;
  try {
    result = read(argv);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(`${error.message}\n\n${usage}`);
    process.exit(2);
  }
  if (result === null) {
    process.stdout.write(usage);
    process.exit(0);
  }
  return result;
}

/** `text` as a positive integer, or a UsageError naming `flag`. */
export function positiveInteger(flag: string, text: string): number {
  const n = Number(text);
  if (text.trim() === "" || !Number.isInteger(n) || n < 1) throw new UsageError(`${flag}: expected a positive integer, got '${text}'`);
  return n;
}

/** `text` as positive numbers separated by commas (e.g. sizes in MiB), or a UsageError naming `flag`. */
export function positiveNumbers(flag: string, text: string): number[] {
  const values = text.split(",").map(Number);
  if (text.trim() === "" || values.some((n) => !(n > 0) || !Number.isFinite(n)))
    throw new UsageError(`${flag}: expected positive numbers separated by commas, got '${text}'`);
  return values;
}

/** `text` as positive integers separated by commas, or a UsageError naming `flag`. */
export function positiveIntegers(flag: string, text: string): number[] {
  const values = text.split(",").map(Number);
  if (text.trim() === "" || values.some((n) => !Number.isInteger(n) || n < 1))
    throw new UsageError(`${flag}: expected positive integers separated by commas, got '${text}'`);
  return values;
}
