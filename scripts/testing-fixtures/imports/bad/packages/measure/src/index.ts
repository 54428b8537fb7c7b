import type { Stats } from "@ulysses/collectives";
import { launch } from "@ulysses/collectives";
export const m = (s: Stats) => [s, launch];
