// Shared by the consumer checks: max |actual - expected| over max |expected|.
import assert from "node:assert/strict";

export function relativeError(actual, expected) {
  assert.equal(actual.length, expected.length, "compared arrays differ in length");
  let diff = 0;
  let scale = 0;
  for (let i = 0; i < expected.length; i++) {
    diff = Math.max(diff, Math.abs(actual[i] - expected[i]));
    scale = Math.max(scale, Math.abs(expected[i]));
  }
  return diff / scale;
}
