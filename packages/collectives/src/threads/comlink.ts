/**
 * comlink for Node ESM: its package has no "exports" map and its "main" is a
 * UMD build, so the ESM files are imported by path. The part of comlink the
 * threads backend uses is typed here, with our own types: comlink's
 * declarations name DOM types (Transferable, EventListenerOrEventListenerObject)
 * that a consumer compiling with `"types": ["node"]` and no DOM lib lacks, and
 * `Remote` reaches the public `LaunchedWorld.rank()`.
 */
// @ts-expect-error: the ESM build ships no declaration of its own (typed below)
import * as esm from "comlink/dist/esm/comlink.mjs";
// @ts-expect-error: as above
import adapter from "comlink/dist/esm/node-adapter.mjs";

/** A rank's Api seen from another thread: every method returns a Promise of its result. */
export type Remote<T> = {
  readonly [K in keyof T]: T[K] extends (...args: infer A) => infer R ? (...args: A) => Promise<Awaited<R>> : Promise<T[K]>;
};

/** A comlink endpoint (opaque: made by `nodeEndpoint`). */
export interface Endpoint {
  readonly postMessage: unknown;
}

interface ComlinkApi {
  wrap<T>(endpoint: Endpoint): Remote<T>;
  expose(value: unknown, endpoint: Endpoint): void;
  transfer<T>(value: T, transfers: unknown[]): T;
}

export const Comlink = esm as ComlinkApi;

/** A comlink endpoint over a Node MessagePort, Worker or parentPort. */
export const nodeEndpoint = adapter as (port: unknown) => Endpoint;
