// @ts-check
// A server-sent events parser (the HTML standard's event stream
// interpretation, less retry): feed it the stream's text as it comes, in
// chunks cut anywhere, and it hands each complete event to onEvent({event,
// id, data}), data lines joined by "\n". Comments, unknown fields and
// events without data are dropped; CRLF and LF both end lines. No DOM:
// web/tests/sse.test.mjs runs it under node --test. The monitor's log
// streams (api.js events) and the playground's OpenAI stream (job.jsx) read
// through it.
/** @typedef {{ event: string, id: string, data: string }} SSEvent */

/**
 * @param {(ev: SSEvent) => void} onEvent
 * @returns {(text: string) => void}
 */
export function sseParser(onEvent) {
  let buf = "";
  /** @type {{ event: string, id: string, data: string[] }} */
  let ev = { event: "message", id: "", data: [] };
  return (text) => {
    buf += text;
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      let line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (line.endsWith("\r")) line = line.slice(0, -1);
      if (line === "") {
        if (ev.data.length) onEvent({ event: ev.event, id: ev.id, data: ev.data.join("\n") });
        ev = { event: "message", id: ev.id, data: [] };
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let v = colon < 0 ? "" : line.slice(colon + 1);
      if (v.startsWith(" ")) v = v.slice(1);
      if (field === "event") ev.event = v;
      else if (field === "id") ev.id = v;
      else if (field === "data") ev.data.push(v);
    }
  };
}
