// A resolve hook: where fs has no globSync, `fs` / `node:fs` resolve to a module that re-exports
// fs and adds a globSync that says why it cannot work.
import * as fs from "node:fs";

const SHIM = new URL("./fs-shim.mjs", import.meta.url).href;

export async function resolve(specifier, context, next) {
  const wantsFs = specifier === "fs" || specifier === "node:fs";
  if (wantsFs && typeof fs.globSync !== "function" && context.parentURL !== SHIM) {
    return { url: SHIM, shortCircuit: true };
  }
  return next(specifier, context);
}
