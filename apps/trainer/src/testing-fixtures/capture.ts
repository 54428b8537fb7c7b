/**
 * For the trainer's in-process tests: runs a bin's `main` (ulysses-train's
 * or ulysses-generate's) in this process with stdout swallowed and stderr
 * captured, and times it. No trainer logic lives here.
 */
import { vi } from "vitest";

export interface Captured {
  /** The exit code main returned. */
  code: number;
  stderr: string;
  ms: number;
}

/** Calls `main(args)` with INIT_CWD cleared (main would change to it). */
export async function captureMain(main: (args: readonly string[]) => Promise<number>, args: readonly string[]): Promise<Captured> {
  process.env.INIT_CWD = "";
  const written: string[] = [];
  const err = vi.spyOn(process.stderr, "write").mockImplementation((chunk: string | Uint8Array) => {
    written.push(String(chunk));
    return true;
  });
  const out = vi.spyOn(process.stdout, "write").mockImplementation(() => true);
  const started = performance.now();
  try {
    const code = await main(args);
    return { code, stderr: written.join(""), ms: performance.now() - started };
  } finally {
    err.mockRestore();
    out.mockRestore();
  }
}
