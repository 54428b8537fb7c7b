import type { Stats } from "@ulysses/collectives";
export type { Stats as CommStats } from "@ulysses/collectives";
export type Launch = typeof import("@ulysses/collectives").launch;
export const delta = (a: Stats, b: Stats) => b.n - a.n;
