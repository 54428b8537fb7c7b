/**
 * The vitest settings every workspace package shares. Each package's
 * vitest.config.ts is `defineConfig(packageTestConfig())`, so `pnpm test`
 * works inside the package; the root vitest.config.ts runs every package as
 * one project of a single run (see there).
 *
 * Tests import package sources directly through the "@ulysses/source" export
 * condition, so no build step is needed before a test run.
 */
import { fileURLToPath } from "node:url";
import type { UserWorkspaceConfig } from "vitest/config";

/** Every test file's own TMPDIR, removed after it (see there). */
const TMPDIR_SETUP = fileURLToPath(new URL("./vitest.tmpdir.ts", import.meta.url));

export function packageTestConfig(overrides: NonNullable<UserWorkspaceConfig["test"]> = {}): UserWorkspaceConfig {
  return {
    resolve: { conditions: ["@ulysses/source"] },
    ssr: { resolve: { conditions: ["@ulysses/source"] } },
    test: {
      include: ["src/**/*.test.ts"],
      pool: "forks",
      testTimeout: 60_000,
      hookTimeout: 60_000,
      env: { ORT_DISABLE_TELEMETRY: "1" },
      setupFiles: [TMPDIR_SETUP],
      ...overrides,
    },
  };
}
