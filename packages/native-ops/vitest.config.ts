import { defineProject } from "vitest/config";
import { packageTestConfig } from "../../vitest.shared.ts";

// `pnpm test` in this package; the root vitest.config.ts runs it as one project.
export default defineProject(packageTestConfig());
