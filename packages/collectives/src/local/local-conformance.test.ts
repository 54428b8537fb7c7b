import { describeConformance } from "../testing/vitest.js";
import { createLocalGroups } from "./local-group.js";

describeConformance("local backend conformance", (size) => createLocalGroups(size, { timeoutMs: 5000 }), { sizes: [1, 2, 3, 4] });
