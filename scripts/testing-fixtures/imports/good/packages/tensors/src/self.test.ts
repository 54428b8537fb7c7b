import { tensor } from "@ulysses/tensors";
export const t = tensor;
