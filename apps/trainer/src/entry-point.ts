/**
 * What the two bins (`ulysses-train`, `ulysses-generate`) share: the
 * package's version and whether a module is the one node was asked to run.
 * Both work from src/ (tsx) and from dist/ (plain node), and through the
 * symlinks and shims that npm and pnpm put in node_modules/.bin.
 */
import fs from "node:fs";
import { fileURLToPath } from "node:url";

/** The version in this package's package.json (one directory above src/ and dist/). */
export function packageVersion(): string {
  const file = new URL("../package.json", import.meta.url);
  return (JSON.parse(fs.readFileSync(file, "utf8")) as { version: string }).version;
}

function realpath(file: string): string | null {
  try {
    return fs.realpathSync(file);
  } catch {
    return null;
  }
}

/**
 * Whether `moduleUrl` (a module's import.meta.url) is the program node
 * started: its real path equals that of `argv1` (process.argv[1], which may be
 * a bin symlink, or lack the extension node resolved).
 */
export function isMainModule(moduleUrl: string, argv1: string | undefined = process.argv[1]): boolean {
  if (argv1 === undefined || !moduleUrl.startsWith("file:")) return false;
  const self = realpath(fileURLToPath(moduleUrl));
  if (self === null) return false;
  return [argv1, `${argv1}.js`, `${argv1}.ts`].some((candidate) => realpath(candidate) === self);
}

/**
 * The line after a refused flag or file (exit 2) when a package manager's
 * script started the bin (`pnpm train`): its own "Command failed with exit
 * code 2" line follows, which a newcomer may read as a crash. Empty when the
 * bin runs on its own.
 */
export function refusalNote(env: NodeJS.ProcessEnv = process.env): string {
  if (!env.npm_lifecycle_event) return "";
  return `note: nothing was started or written (exit code ${EXIT.badFlags}: a refused flag or file); the package manager's "Command failed" line below only repeats that code\n`;
}

/** Exit codes of both bins (also in --help and the README). */
export const EXIT = {
  done: 0,
  error: 1,
  badFlags: 2,
  SIGINT: 130,
  SIGTERM: 143,
} as const;

export const EXIT_CODES_HELP = [
  "Exit codes: 0 done, 1 error (a failing rank is named), 2 bad flags,",
  "130 stopped by SIGINT (Ctrl-C), 143 stopped by SIGTERM (Slurm, Kubernetes, docker stop).",
  "SIGINT and SIGTERM finish the current step, save a checkpoint and write the",
  "outputs first; a second signal stops at once (the last complete checkpoint is kept).",
].join("\n");
