/** Test fixture: registers the recording backend by name at import time, then serves the conformance checks. */
import { registerBackend } from "../registry.js";
import { runConformance } from "../testing/index.js";
import type { RankContext } from "../threads/protocol.js";
import createRecordingBackend, { type RecordingGroup } from "./recording-backend.js";

registerBackend("recording", createRecordingBackend);

export default function setup({ group }: RankContext) {
  return {
    run: (names: string[]) => runConformance(group, { only: names }),
    recorded: () => ({ backend: group.backend, calls: (group as RecordingGroup).calls.length }),
  };
}
