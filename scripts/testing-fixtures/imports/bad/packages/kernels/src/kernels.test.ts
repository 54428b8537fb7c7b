import { block } from "@ulysses/block";
export const b = block;
