import { launch } from "@ulysses/collectives";
export const l = launch;
