import { tensor } from "@ulysses/tensors";
import { launch } from "@ulysses/collectives";
export const k = [tensor, launch];
