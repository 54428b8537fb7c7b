/**
 * A run directory, the folder a training program writes its outputs into:
 * the checks made before anything is written (is it an existing run, a
 * non-empty directory, on a pseudo file system such as /proc), its creation
 * with a bounded probe of writability, and the start-up clean-up (temporaries
 * a crash left behind, an old run's files being replaced). Every error names
 * the setting the directory came from and the path; the program names its
 * files and its settings (as parallelDimsProblems takes flag names).
 */
import fs from "node:fs";
import path from "node:path";
import { TrainingError } from "../errors.js";
import { errnoText } from "@ulysses/model";

/** What a run writes and which of those files make a directory a run. */
export interface RunFiles {
  /** Every file (or directory the run writes whole) a run writes into its directory (an overwrite removes these, and only these). */
  files: readonly string[];
  /** The files whose presence makes a directory a run. */
  markers: readonly string[];
}

/** Temporaries of writeFileAtomic (@ulysses/model: `.<name>.tmp-<pid>-<time>-<n>`) for the run's files. */
const TEMPORARY = /^\.(.+)\.tmp-\d+-\d+-\d+$/;

/** Pseudo file systems (statfs f_type) where a run directory makes no sense; mkdir on some of them never returns. */
const PSEUDO_FILE_SYSTEMS: Record<number, string> = {
  40864: "proc",
  1650812274: "sysfs",
  2613483: "cgroup",
  1667723888: "cgroup2",
  1684170528: "debugfs",
  1953653091: "tracefs",
  1935894131: "securityfs",
  7377: "devpts",
  3405662737: "bpf",
  1634035564: "pstore",
  3730735588: "efivarfs",
  1650812272: "configfs",
  1702057283: "fusectl",
  1112100429: "binfmt_misc",
  4979: "devtmpfs",
  427819522: "mqueue",
  1853056627: "nsfs",
};

/** The device directory: a run directory never goes there, whatever file system backs it (a tmpfs on some machines); /dev/shm is ordinary shared memory. */
function underDeviceDirectory(dir: string): boolean {
  let real: string;
  try {
    real = fs.realpathSync(existingAncestor(dir));
  } catch {
    real = path.resolve(dir);
  }
  const rest = path.relative(real, path.resolve(dir));
  const full = path.join(real, rest);
  return (full === "/dev" || full.startsWith("/dev/")) && !(full === "/dev/shm" || full.startsWith("/dev/shm/"));
}

/** The deepest existing ancestor of `dir` (itself when it exists). */
function existingAncestor(dir: string): string {
  let at = path.resolve(dir);
  for (;;) {
    try {
      fs.statSync(at);
      return at;
    } catch {
      const parent = path.dirname(at);
      if (parent === at) return at;
      at = parent;
    }
  }
}

/** The name of the pseudo file system `dir` (or its deepest existing ancestor) lies on, or null. */
export function pseudoFileSystemOf(dir: string): string | null {
  try {
    return PSEUDO_FILE_SYSTEMS[fs.statfsSync(existingAncestor(dir)).type] ?? null;
  } catch {
    return null;
  }
}

function sameDirectory(a: string, b: string): boolean {
  try {
    return fs.realpathSync(a) === fs.realpathSync(b);
  } catch {
    return path.resolve(a) === path.resolve(b);
  }
}

export interface RunDirCheck {
  /** The setting the directory came from (for messages), e.g. --out or --resume. */
  flag: string;
  /** The directory of the checkpoint being resumed, or null. */
  resumeDir: string | null;
  overwrite: boolean;
  /** The run's files. */
  run: RunFiles;
  /** The program's names for resuming, choosing the directory and replacing a run, in its messages (e.g. --resume, --out, --overwrite). */
  names: { resume: string; out: string; overwrite: string };
}

/** What the directory is: new (to be created), empty, the resumed run's own, or one --overwrite lets the run write into. */
export type RunDirState = "new" | "empty" | "resumed" | "overwritten";

/**
 * Checks `dir` without writing anything: refuses a pseudo file system, a
 * path that is not a directory, an existing run (unless it is the one being
 * resumed, or --overwrite) and a non-empty directory (unless --overwrite).
 */
export function checkRunDir(dir: string, check: RunDirCheck): RunDirState {
  const { flag, names } = check;
  if (underDeviceDirectory(dir))
    throw new TrainingError(`${flag} '${dir}': that is in /dev, the device directory, which cannot hold a run directory; choose a directory on a disk`);
  const pseudo = pseudoFileSystemOf(dir);
  if (pseudo !== null)
    throw new TrainingError(`${flag} '${dir}': that is on the ${pseudo} pseudo file system, which cannot hold a run directory; choose a directory on a disk`);
  let stat: fs.Stats;
  try {
    stat = fs.statSync(dir);
  } catch (cause) {
    if ((cause as NodeJS.ErrnoException).code === "ENOENT") return "new";
    const doing = (cause as NodeJS.ErrnoException).code === "ENOTDIR" ? "cannot create the run directory" : "cannot use it as the run directory";
    throw new TrainingError(`${flag} '${dir}': ${doing}: ${errnoText(cause)}`);
  }
  if (!stat.isDirectory()) throw new TrainingError(`${flag} '${dir}' exists and is not a directory`);
  let entries: string[];
  try {
    entries = fs.readdirSync(dir);
  } catch (cause) {
    throw new TrainingError(`${flag} '${dir}': cannot list the directory: ${errnoText(cause)}`);
  }
  if (check.resumeDir !== null && sameDirectory(dir, check.resumeDir)) return "resumed";
  if (entries.length === 0) return "empty";
  const markers = check.run.markers.filter((name) => entries.includes(name));
  if (check.overwrite) return "overwritten";
  if (markers.length > 0) {
    throw new TrainingError(
      `${flag} '${dir}' holds a run (${markers.join(", ")}): continue it with ${names.resume} '${dir}', write elsewhere with another ${names.out}, or replace it with ${names.overwrite}`,
    );
  }
  const shown = entries
    .slice(0, 3)
    .map((e) => `'${e}'`)
    .join(", ");
  throw new TrainingError(
    `${flag} '${dir}' is not empty (${entries.length} entr${entries.length === 1 ? "y" : "ies"}: ${shown}${entries.length > 3 ? ", ..." : ""}) and holds no run: choose a new or empty directory, or pass ${names.overwrite} to write the run's files there`,
  );
}

/**
 * Creates `dir` (parents too, one level at a time: Node's recursive mkdir
 * never returns on /proc) and proves it writable with a small temporary file.
 * On failure removes the directories it created and throws naming the flag.
 */
export function createRunDir(dir: string, flag: string): void {
  const absolute = path.resolve(dir);
  const missing: string[] = [];
  for (let at = absolute; !fs.existsSync(at); at = path.dirname(at)) {
    missing.unshift(at);
    if (path.dirname(at) === at) break;
  }
  const created: string[] = [];
  const undo = () => {
    for (const d of created.reverse()) fs.rmSync(d, { recursive: true, force: true });
  };
  for (const d of missing) {
    try {
      fs.mkdirSync(d);
      created.push(d);
    } catch (cause) {
      if ((cause as NodeJS.ErrnoException).code === "EEXIST" && fs.statSync(d).isDirectory()) continue;
      undo();
      throw new TrainingError(`${flag} '${dir}': cannot create the run directory: ${errnoText(cause)}${d === absolute ? "" : ` (at '${d}')`}`);
    }
  }
  const probe = path.join(absolute, `.ulysses-write-test-${process.pid}`);
  try {
    fs.writeFileSync(probe, "ok\n");
    fs.rmSync(probe);
  } catch (cause) {
    fs.rmSync(probe, { force: true });
    undo();
    throw new TrainingError(`${flag} '${dir}': cannot write in the run directory: ${errnoText(cause)}`);
  }
}

/** Removes what a crash during an atomic write left in `dir` (`.checkpoint.safetensors.tmp-*` and the like); returns their names. */
export function removeStaleTemporaries(dir: string, run: RunFiles): string[] {
  const removed: string[] = [];
  for (const name of fs.readdirSync(dir)) {
    const match = TEMPORARY.exec(name);
    if (match === null || !run.files.includes(match[1]!)) continue;
    fs.rmSync(path.join(dir, name), { force: true });
    removed.push(name);
  }
  return removed;
}

/** Removes the run files of an earlier run (it is being replaced); other files stay. */
export function clearRunFiles(dir: string, run: RunFiles): void {
  // a name may be a directory the run writes whole (the Hugging Face export, hf/)
  for (const name of run.files) fs.rmSync(path.join(dir, name), { force: true, recursive: true });
}
