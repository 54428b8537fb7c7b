/** The rank side of the collectives benchmark under `launch`: measures on the world group. */
import type { RankContext } from "@ulysses/collectives";
import { measureRank, type BenchConfig } from "./collectives-measure.js";

export default function setup({ group }: RankContext) {
  return { measure: (config: BenchConfig) => measureRank(group, config) };
}
