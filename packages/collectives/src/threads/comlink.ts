/**
 * comlink for Node ESM: its package has no "exports" map and its "main" is a
 * UMD build, so the ESM files are imported by path and typed with the
 * package's own declarations.
 */
// @ts-ignore: the ESM build ships no declaration of its own (typed below)
import * as esm from "comlink/dist/esm/comlink.mjs";
// @ts-ignore: as above
import adapter from "comlink/dist/esm/node-adapter.mjs";
import type * as ComlinkTypes from "comlink";

export const Comlink = esm as typeof ComlinkTypes;
export type Remote<T> = ComlinkTypes.Remote<T>;

/** A comlink endpoint over a Node MessagePort, Worker or parentPort. */
export const nodeEndpoint = adapter as (port: unknown) => ComlinkTypes.Endpoint;
