// The team page's inference usage (web/src/usage.js): tokens by day with
// every day present, the CSV link, the short counts. Needs no platform.
import { test } from "node:test";
import assert from "node:assert/strict";
import { compact, csvHref, tokensByDay, usageFrom } from "../src/usage.js";

const now = Date.parse("2026-12-06T09:30:00Z");

test("tokensByDay: the last days oldest first, days without usage 0, others summed, outside ones left out", () => {
  const items = [
    { start: "2026-12-06T00:00:00Z", promptTokens: 100, completionTokens: 20, requests: 3 },
    { start: "2026-12-04T00:00:00Z", promptTokens: 7, completionTokens: 0, requests: 1 },
    { start: "2026-12-04T00:00:00Z", promptTokens: 3, completionTokens: 5, requests: 2 }, // another key's, same day
    { start: "2026-11-01T00:00:00Z", promptTokens: 999, completionTokens: 999, requests: 9 },
    { promptTokens: 1, completionTokens: 1, requests: 1 }, // not grouped by time
  ];
  assert.deepEqual(tokensByDay(items, 3, now), [
    { day: "2026-12-04", prompt: 10, completion: 5, requests: 3 },
    { day: "2026-12-05", prompt: 0, completion: 0, requests: 0 },
    { day: "2026-12-06", prompt: 100, completion: 20, requests: 3 },
  ]);
  assert.equal(tokensByDay([], 30, now).length, 30);
});

test("usageFrom and csvHref: from the first day's start, by day, key and model, for the team", () => {
  assert.equal(usageFrom(30, now), "2026-11-07T00:00:00.000Z");
  const u = new URL(csvHref("ml", 30, now), "http://x");
  assert.equal(u.pathname, "/api/v1/usage");
  assert.equal(u.searchParams.get("format"), "csv");
  assert.equal(u.searchParams.get("groupBy"), "day,key,model");
  assert.equal(u.searchParams.get("team"), "ml");
  assert.equal(u.searchParams.get("from"), "2026-11-07T00:00:00.000Z");
});

test("compact", () => {
  assert.deepEqual([0, 950, 1000, 12345, 4_500_000, 2e9].map(compact), ["0", "950", "1k", "12.3k", "4.5M", "2G"]);
});
