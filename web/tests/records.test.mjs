// Whose a log record is (web/src/records.js): the platform's only when it
// is a system record that no agent wrote. Needs no platform.
import { test } from "node:test";
import assert from "node:assert/strict";
import { isPlatformRecord } from "../src/records.js";

test("isPlatformRecord: agents' system records and the job's output are not the platform's", () => {
  for (const [r, want] of [
    [{ source: "system", stream: "sim-us-1", step: "boot" }, true],
    [{ source: "system", step: "schedule" }, true],
    [{ source: "system", stream: "wrk-monitor", step: "loki_dropped" }, true],
    [{ source: "system", stream: "agent-instance", step: "boot" }, false],
    [{ source: "system", stream: "agent-inference", step: "import_disk" }, false],
    [{ source: "application", stream: "sim-us-1", step: "boot" }, false],
    [{ source: "application", stream: "stdout" }, false],
  ]) {
    assert.equal(isPlatformRecord(r), want, JSON.stringify(r));
  }
});
