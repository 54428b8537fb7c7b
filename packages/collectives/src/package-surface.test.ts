/**
 * Two entries for two audiences: the root is the API a training program
 * calls (ProcessGroup, launch, splitWorld, the backend registry), and
 * `@ulysses/collectives/backend` what a backend author builds on.
 */
import * as root from "@ulysses/collectives";
import * as backend from "@ulysses/collectives/backend";
import { describe, expect, it } from "vitest";

describe("@ulysses/collectives' entries", () => {
  it("the backend author's pieces are on the backend subpath only", () => {
    for (const name of ["GroupBase", "planOp", "outputShapeOf", "checkP2P", "reduceInto", "StatsRecorder", "asTensor"]) {
      expect(backend, name).toHaveProperty(name);
      expect(root, name).not.toHaveProperty(name);
    }
  });

  it("the root keeps the user's API", () => {
    for (const name of ["CollectiveError", "createLocalGroups", "launch", "splitWorld", "init", "registerBackend", "loadBackend", "listBackends"])
      expect(root, name).toHaveProperty(name);
  });
});
