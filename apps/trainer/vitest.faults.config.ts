import { defineConfig } from "vitest/config";
import { packageTestConfig } from "../../vitest.shared.ts";

// `pnpm test:faults` (root): only the fault-injection suite, src/faults.test.ts,
// which `pnpm test` leaves out (see vitest.config.ts). Its trials bound their
// own concurrency (two trainer processes at a time).
const config = packageTestConfig({ include: ["src/faults.test.ts"], testTimeout: 300_000 });
export default defineConfig({ ...config, root: import.meta.dirname });
