import { launch } from "@ulysses/collectives";
import { delta } from "@ulysses/measure";
import "@ulysses/block";
export const b = [launch, delta];
