/** Test fixture: a rank that runs the conformance checks on its world group. */
import type { RankContext } from "../threads/protocol.js";
import { runConformance } from "../testing/index.js";

export default function setup({ group }: RankContext) {
  return {
    run: (names: string[]) => runConformance(group, { only: names }),
    backendOf: () => group.backend,
  };
}
