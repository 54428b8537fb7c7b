/**
 * Without the addon, importing the package still works (and registers
 * "fused"), and constructing FusedAttention, directly or through
 * createAttention, throws an error that says how to build it. Runs in a child
 * process pointed at a missing addon, so it runs whether or not the addon is
 * built here.
 */
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const script = `
import { FusedAttention, fusedAttentionStatus } from "@ulysses/native-ops";
import { createAttention } from "@ulysses/kernels";
const status = fusedAttentionStatus();
let message = "constructed";
try { new FusedAttention({ threads: 1 }); } catch (error) { message = error.name + ": " + error.message; }
let created = "created";
try { await createAttention({ implementation: "fused", threads: 1 }); } catch (error) { created = error.name + ": " + error.message; }
console.log(JSON.stringify({ available: status.available, message, created }));
`;

describe("FusedAttention without the native addon", () => {
  it("imports, reports unavailable, and throws a build hint from the constructor", () => {
    const run = spawnSync(process.execPath, ["--conditions=@ulysses/source", "--import", "tsx", "--input-type=module", "-e", script], {
      cwd: fileURLToPath(new URL("..", import.meta.url)),
      env: { ...process.env, ORT_DISABLE_TELEMETRY: "1", ULYSSES_FUSED_ATTENTION_ADDON: "/nonexistent/ulysses_fused_attention.node" },
      encoding: "utf8",
    });
    expect(run.status, run.stderr).toBe(0);
    const result = JSON.parse(run.stdout.trim().split("\n").at(-1)!) as { available: boolean; message: string; created: string };
    expect(result.available).toBe(false);
    expect(result.message).toMatch(/^FusedAttentionError: the fused-attention addon is not built \(no \/nonexistent\/ulysses_fused_attention.node\)/);
    expect(result.message).toContain("npm rebuild @ulysses/native-ops");
    expect(result.message).toContain("pnpm --filter @ulysses/native-ops build:native");
    // Through the registry ("fused" is registered on import even without the addon): the same hint, naming the implementation.
    expect(result.created).toMatch(/^KernelError: attention implementation 'fused' could not be created: the fused-attention addon is not built/);
    expect(result.created).toContain("npm rebuild @ulysses/native-ops");
  });
});
