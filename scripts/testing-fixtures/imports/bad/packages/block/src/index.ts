import { k } from "@ulysses/kernels";
import { tensor } from "../../tensors/src/index.js";

export { model } from "@ulysses/model";
export const testing = await import("@ulysses/collectives/testing");
export const block = [k, tensor];
