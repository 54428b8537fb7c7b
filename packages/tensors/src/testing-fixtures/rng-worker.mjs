// Worker entry (plain JavaScript, so Node can start it without a loader): it
// registers tsx for this thread and runs the TypeScript fixture next to it.
import { tsImport } from "tsx/esm/api";

await tsImport("./rng-worker.ts", import.meta.url);
