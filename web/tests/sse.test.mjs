// The server-sent events parser (web/src/sse.js) the log streams and the
// playground read through. Needs no platform.
import { test } from "node:test";
import assert from "node:assert/strict";
import { sseParser } from "../src/sse.js";

const parse = (chunks) => {
  const got = [];
  const feed = sseParser((e) => got.push(e));
  for (const c of chunks) feed(c);
  return got;
};

test("sseParser: events, fields and comments, as the HTML standard reads them", () => {
  const stream = ": a comment\nid: 7\nevent: record\ndata: {\"a\":1}\n\ndata: first\ndata: second\n\nevent: gap\ndata:\n\nid: 9\nretry: 10\n\nunknown: x\ndata:no-space\n\n";
  assert.deepEqual(parse([stream]), [
    { event: "record", id: "7", data: "{\"a\":1}" },
    { event: "message", id: "7", data: "first\nsecond" }, // the last event ID stays
    { event: "gap", id: "7", data: "" },
    { event: "message", id: "9", data: "no-space" }, // an event without data is none
  ]);
});

test("sseParser: chunks cut anywhere, CRLF lines, and an unfinished event at the end", () => {
  const stream = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\r\n\r\ndata: [DONE]\r\n\r\ndata: never ended";
  const whole = parse([stream]);
  for (let cut = 1; cut < stream.length; cut++) {
    assert.deepEqual(parse([stream.slice(0, cut), stream.slice(cut)]), whole, `cut at ${cut}`);
  }
  assert.deepEqual(parse(stream.split("")), whole, "a character at a time");
  assert.deepEqual(whole.map((e) => e.data), ["{\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}", "[DONE]"]);
});
