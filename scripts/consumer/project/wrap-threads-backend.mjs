// A module-path backend, as a user would write one: its default export is a
// BackendFactory that starts the built-in threads backend's group and tags it.
import { getBackend } from "@ulysses/collectives";

export default async function createBackend(options) {
  const threads = getBackend("threads");
  if (!threads) throw new Error("the threads backend is not registered in this module instance");
  const group = await threads(options);
  return new Proxy(group, { get: (target, key) => (key === "backend" ? "wrapped-module" : Reflect.get(target, key)) });
}
