// The Terminal tab's terminal: xterm.js over the API's WebSocket to the
// job's instance agent (GET /api/v1/jobs/{id}/terminal; docs/webui.md).
// Loaded only when the tab opens.
import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";

export function openTerminal(el, { jobID, replica, team, onState }) {
  const term = new Terminal({ cursorBlink: true, convertEol: false, fontSize: 14, scrollback: 5000, screenReaderMode: false });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(el);
  fit.fit();
  const q = new URLSearchParams({ replica: String(replica), cols: String(term.cols), rows: String(term.rows) });
  if (team) q.set("team", team);
  const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/api/v1/jobs/${encodeURIComponent(jobID)}/terminal?${q}`);
  ws.binaryType = "arraybuffer";
  const enc = new TextEncoder();
  let ended = false;
  ws.onopen = () => {
    onState("connected");
    term.focus();
  };
  ws.onmessage = (ev) => {
    if (typeof ev.data === "string") {
      const m = JSON.parse(ev.data);
      if (m.type === "exit") {
        ended = true;
        term.write(`\r\n[exited with status ${m.code}]\r\n`);
        onState(`exited (${m.code})`);
      }
      return;
    }
    term.write(new Uint8Array(ev.data));
  };
  ws.onclose = (ev) => {
    if (!ended) onState(ev.code === 1000 ? "closed" : `disconnected${ev.reason ? ": " + ev.reason : ""}`);
  };
  const data = term.onData((d) => {
    if (ws.readyState === WebSocket.OPEN) ws.send(enc.encode(d));
  });
  const resize = term.onResize(({ cols, rows }) => {
    if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "resize", cols, rows }));
  });
  const ro = new ResizeObserver(() => fit.fit());
  ro.observe(el);
  return () => {
    ro.disconnect();
    data.dispose();
    resize.dispose();
    ws.close(1000);
    term.dispose();
  };
}
