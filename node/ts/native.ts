/** The addon, loaded by the loader `napi build` generates (`native.js`). */

import type * as Native from "../native.js";

// eslint-disable-next-line @typescript-eslint/no-require-imports
export const native: typeof Native = require("../native.js");
export type { Native };
