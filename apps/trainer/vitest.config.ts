import { defineProject } from "vitest/config";
import { packageTestConfig } from "../../vitest.shared.ts";

// `pnpm test` in this package (src/**/*.test.ts, "@ulysses/source" condition,
// forks, 60 s timeouts, ORT_DISABLE_TELEMETRY=1); the root vitest.config.ts
// runs it as one project.
export default defineProject(packageTestConfig());
