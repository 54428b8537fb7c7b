import { defineConfig } from "vitest/config";

// One vitest run over the whole workspace. Tests import package sources
// directly through the "@ulysses/source" export condition, so no build step is
// needed before `pnpm test`.
export default defineConfig({
  resolve: { conditions: ["@ulysses/source"] },
  ssr: { resolve: { conditions: ["@ulysses/source"] } },
  test: {
    include: ["packages/*/src/**/*.test.ts", "apps/*/src/**/*.test.ts", "tools/*/src/**/*.test.ts"],
    pool: "forks",
    testTimeout: 60_000,
    hookTimeout: 60_000,
    env: { ORT_DISABLE_TELEMETRY: "1" },
  },
});
