import { unknown } from "@ulysses/nowhere";
export const u = unknown;
