import { describe, expect, it } from "vitest";
import { getBackend, init } from "@ulysses/collectives";
import { join } from "node:path";
import { tmpdir } from "node:os";
import { abortMessage } from "./lifecycle.js";
import { loadAddon, MpiError, mpiBackend, mpirunCommand, SOURCE_CONDITION_ARG } from "./index.js";

// These run everywhere, MPI or not: nothing here starts MPI.
describe("collectives-mpi package surface", () => {
  it("registers the factory as backend 'mpi' on import", () => {
    expect(getBackend("mpi")).toBe(mpiBackend);
  });

  it("a missing addon is reported with the apt packages to install and the build command", () => {
    const missing = join(tmpdir(), "no-such-dir", "ulysses_mpi.node");
    let error: unknown;
    try {
      loadAddon(missing);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(MpiError);
    const message = (error as Error).message;
    expect(message).toContain(missing);
    expect(message).toContain("apt-get install -y openmpi-bin libopenmpi-dev");
    expect(message).toContain("pnpm --filter @ulysses/collectives-mpi build:addon");
  });

  it("rejects bad options before touching MPI", async () => {
    await expect(init({ backend: "mpi", timeoutMs: -1 })).rejects.toThrow("timeoutMs must be a number >= 0 (0 disables), got -1");
    await expect(init({ backend: "mpi", reduction: "fastest" })).rejects.toThrow("reduction must be one of ordered, mpi, got fastest");
  });

  it("mpirunCommand runs plain node by default, and adds tsx and node flags when asked", () => {
    const [command, ...args] = mpirunCommand({ np: 4, entry: "x.mjs", args: ["--a"], exportEnv: ["FOO=1"], mpirunArgs: ["--host", "h:4"] });
    expect(command).toBe("mpirun");
    expect(args.join(" ")).toBe("--allow-run-as-root --oversubscribe --bind-to none -x ORT_DISABLE_TELEMETRY=1 -x FOO=1 --host h:4 -np 4 node x.mjs --a");
    expect(mpirunCommand({ np: 2, entry: "x.ts", typescript: true }).slice(-4).join(" ")).toBe("node --import tsx x.ts");
    const workspace = mpirunCommand({ np: 2, node: "/usr/bin/node", entry: "x.ts", args: ["--b"], typescript: true, nodeArgs: [SOURCE_CONDITION_ARG] });
    expect(workspace.slice(-6).join(" ")).toBe("/usr/bin/node --conditions=@ulysses/source --import tsx x.ts --b");
  });

  it("the abort line names the rank, pid, host and exit code", () => {
    expect(abortMessage(3, 2, "is exiting with an error")).toMatch(
      /^\[ulysses mpi\] rank 3 \(pid \d+ on .+\) is exiting with an error \(exit code 2\): aborting the MPI job$/,
    );
  });
});
