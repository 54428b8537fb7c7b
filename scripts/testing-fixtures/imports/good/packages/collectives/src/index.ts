import { tensor } from "@ulysses/tensors";
export type Stats = { n: number };
export const launch = () => tensor;
