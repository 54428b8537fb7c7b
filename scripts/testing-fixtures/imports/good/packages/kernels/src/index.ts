import { tensor } from "@ulysses/tensors";
import { local } from "./local.js";
import pkg from "../package.json" with { type: "json" };
// import { launch } from "@ulysses/collectives";  (a comment is no import)
/* export * from "@ulysses/block"; */
const message = "import x from '@ulysses/collectives'";
const pattern = /import\("@ulysses\/collectives"\)/;
const ratio = tensor / 2 / local;
export { message, pattern, ratio, pkg };
