// Loaded with `node --import` before the conformance suite: Node 20 lacks fs.globSync, which
// the suite imports (only its tier-check command calls it). On Node >= 22 this changes nothing.
import { register } from "node:module";

register("./hooks.mjs", import.meta.url);
