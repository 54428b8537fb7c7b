// Test fixture (compiled-launch.test.ts): run with plain node (no tsx, no
// conditions) from a temporary install tree whose node_modules holds the
// compiled @ulysses/collectives. argv: [entry, typescript ("1" or "0"), methods...].
// Prints one line: RESULT {json}.
import { CollectiveError, launch } from "@ulysses/collectives";

const [entry, typescript, ...methods] = process.argv.slice(2);
const out = {};
try {
  const world = await launch({ worldSize: 2, entry, backend: "wrapped", typescript: typescript === "1", timeoutMs: 20_000 });
  try {
    for (const method of methods) out[method] = await world.all(method);
  } finally {
    out.exitCodes = await world.shutdown();
  }
} catch (e) {
  out.error = { collective: e instanceof CollectiveError, message: String(e?.message ?? e) };
}
console.log(`RESULT ${JSON.stringify(out)}`);
