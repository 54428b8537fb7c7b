import { configDefaults, defineProject } from "vitest/config";
import { packageTestConfig } from "../../vitest.shared.ts";

// `pnpm test` in this package (src/**/*.test.ts, "@ulysses/source" condition,
// forks, 60 s timeouts, ORT_DISABLE_TELEMETRY=1); the root vitest.config.ts
// runs it as one project. The fault-injection suite (src/faults.test.ts, a
// few minutes of spawned trainers) runs only under `pnpm test:faults`
// (vitest.faults.config.ts).
export default defineProject(packageTestConfig({ exclude: [...configDefaults.exclude, "src/faults.test.ts"] }));
