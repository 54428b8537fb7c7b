// Rank entry: registers the consumer's tracing backend and runs the exported
// conformance suite on the world group it gets (no test runner involved).
import { runConformance } from "@ulysses/collectives/testing";
import { calls, registerTracing } from "./tracing-backend.mjs";

registerTracing();

export default async function setup({ group }) {
  return {
    async conformance() {
      const results = await runConformance(group);
      return { backend: group.backend, results, forwarded: Object.fromEntries(calls) };
    },
  };
}
