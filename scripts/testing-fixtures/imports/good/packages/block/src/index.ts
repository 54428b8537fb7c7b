import type { tensor } from "@ulysses/tensors";
export * from "@ulysses/kernels";
export const kernels = await import("@ulysses/kernels");
export const where = import.meta.resolve("@ulysses/kernels");
export type T = typeof tensor;
