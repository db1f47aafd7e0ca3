// Types of the ES module entry: the same as the CommonJS entry's.
export * from "./dist/index.js";
