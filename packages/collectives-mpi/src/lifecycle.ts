/**
 * MPI's lifetime in this process: initialise once (MPI_THREAD_MULTIPLE, which
 * the lanes need: several native threads call MPI at once), finalize on a
 * clean exit, abort the whole job on any other exit. A rank that leaves
 * without MPI_Finalize makes mpirun kill the job anyway; aborting first puts
 * a line naming the rank on stderr and ends the job at once instead of
 * leaving peers blocked in a collective. Groups and data live elsewhere.
 */
import { hostname } from "node:os";
import { loadAddon, type NativeMpi } from "./addon.js";
import { MpiError } from "./errors.js";

export interface MpiProcess {
  native: NativeMpi;
  rank: number;
  size: number;
  processor: string;
  library: string;
}

let current: MpiProcess | null = null;
let finalized = false;
/** The first failure of any group in this process (a timeout leaves an MPI call pending for good). */
let firstFailure: string | null = null;

/** Records a group failure; the exit hook names the first one when it must abort the job. */
export function noteFailure(reason: string): void {
  firstFailure ??= reason;
}

/** Text of the line a failing rank prints before the job is aborted. */
export function abortMessage(rank: number, code: number, reason: string): string {
  return `[ulysses mpi] rank ${rank} (pid ${process.pid} on ${hostname()}) ${reason} (exit code ${code}): aborting the MPI job`;
}

/**
 * Node emits 'exit' before it prints an uncaught error, and the abort in
 * onExit kills the process before that print: print it here first.
 */
function onUncaught(error: unknown, origin: string): void {
  const text = error instanceof Error ? (error.stack ?? error.message) : String(error);
  process.stderr.write(`[ulysses mpi] rank ${current?.rank ?? "?"} (pid ${process.pid} on ${hostname()}): ${origin}: ${text}\n`);
}

function onExit(code: number): void {
  if (!current || finalized) return;
  const { native, rank } = current;
  const pending = native.state().pendingJobs;
  if (code === 0 && pending === 0) {
    finalized = true;
    native.finalize();
    return;
  }
  const after = firstFailure === null ? "" : ` after a failed operation (${firstFailure})`;
  const reason = code !== 0 ? `is exiting with an error${after}` : `is exiting with ${pending} MPI operation(s) still running${after}`;
  native.abort(code === 0 ? 1 : code, abortMessage(rank, code, reason));
}

/** Initialises MPI once per process and installs the exit hook. */
export function startMpi(): MpiProcess {
  if (current) return current;
  if (finalized) throw new MpiError("MPI was finalized in this process; it cannot be initialised again (start a new process with mpirun)");
  const native = loadAddon();
  // OpenMPI busy-polls while it waits. Ranks share few cores with ONNX
  // Runtime and with each other, so a spinning rank steals the core its peer
  // needs (measured here under load: 16-byte collectives at 1-8 ms instead of
  // ~30 us). Yield when idle unless the user chose otherwise (--mca or -x).
  process.env.OMPI_MCA_mpi_yield_when_idle ??= "1";
  const info = native.init();
  if (!info.threadMultiple) {
    native.abort(
      1,
      `[ulysses mpi] rank ${info.rank}: the MPI library provides ${info.threadLevel}, but the mpi backend needs MPI_THREAD_MULTIPLE (${info.library})`,
    );
  }
  current = { native, rank: info.rank, size: info.size, processor: info.processor, library: info.library };
  process.on("exit", onExit);
  process.on("uncaughtExceptionMonitor", onUncaught);
  return current;
}

/**
 * Finalizes MPI now (collective: every rank must call it); later exits do
 * nothing. With operations still pending (a timed-out one never returns)
 * MPI cannot be finalized: it throws and leaves the exit hook in place, which
 * aborts the job naming this rank.
 */
export function finalizeMpi(): void {
  if (!current || finalized) return;
  const pending = current.native.state().pendingJobs;
  if (pending > 0)
    throw new MpiError(
      `cannot finalize MPI on rank ${current.rank} with ${pending} operation(s) still running${firstFailure === null ? "" : ` (the first failure: ${firstFailure})`}; the job will be aborted when this process exits`,
    );
  finalized = true;
  process.off("exit", onExit);
  process.off("uncaughtExceptionMonitor", onUncaught);
  current.native.finalize();
}

/** Aborts the whole job with a message naming this rank (never returns normally). */
export function abortJob(code: number, reason: string): void {
  if (!current || finalized) return;
  current.native.abort(code, abortMessage(current.rank, code, reason));
}
