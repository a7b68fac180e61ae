// Test harness: a real `cosmicac up` (the binary in $COSMICAC_BIN, built
// by hack/webui.sh) on a fresh data directory, and the API as the admin.
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export async function startPlatform() {
  const bin = process.env.COSMICAC_BIN;
  if (!bin) throw new Error("COSMICAC_BIN is not set: run hack/webui.sh --test");
  const dataDir = mkdtempSync(join(tmpdir(), "cosmicac-ui-"));
  // The load test creates 1,000 jobs in one team at once: lift the
  // per-team create rate (120 a minute by default) for this platform.
  // The llama.cpp runtime's engine (hack/test.sh builds it and names it
  // here): with HOME the fresh data directory, up would not find the
  // cache's build by itself.
  const llama = process.env.COSMICAC_LLAMA_SERVER ? ["--llama-server", process.env.COSMICAC_LLAMA_SERVER] : [];
  const proc = spawn(bin, ["up", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--metrics-listen", "", "--sim-step", "300ms", "--job-creates-per-minute", "2000", ...llama], {
    env: { ...process.env, HOME: dataDir, XDG_CONFIG_HOME: join(dataDir, "config") },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let errOut = "";
  proc.stderr.on("data", (d) => (errOut += d));
  const url = await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`cosmicac up did not start in 60s:\n${out}\n${errOut}`)), 60000);
    proc.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/^\s*web\s+(http:\/\/\S+?)\/\s/m);
      if (m) {
        clearTimeout(t);
        resolve(m[1]);
      }
    });
    proc.on("exit", (code) => reject(new Error(`cosmicac up exited ${code}:\n${out}\n${errOut}`)));
  });
  const token = readFileSync(join(dataDir, "admin.token"), "utf8").trim();
  const env = { ...process.env, HOME: dataDir, XDG_CONFIG_HOME: join(dataDir, "config") };
  // rpc calls a component's fabric method as an operator (`cosmicac rpc`
  // with the CLI key that up admits), the component named as up prints its
  // fabric peers ("wrk-monitor").
  const rpc = async (component, method, data) => {
    const peer = await waitFor(`${component} in up's output`, () => (out.match(new RegExp(`^\\s*${component}\\s+(\\S+@\\S+)$`, "m")) || [])[1], 10000);
    const res = execFileSync(bin, ["rpc", "--peer", peer, "--method", method, "--data", JSON.stringify(data)], { env, encoding: "utf8" });
    return res.trim() ? JSON.parse(res) : null;
  };
  const api = async (method, path, body, tok = token, team = "") => {
    const h = { Authorization: `Bearer ${tok}`, "Content-Type": "application/json" };
    if (team) h["X-Cosmicac-Team"] = team;
    const res = await fetch(url + "/api/v1" + path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
    return text ? JSON.parse(text) : null;
  };
  return {
    url,
    dataDir,
    token,
    api,
    rpc,
    stderr: () => errOut,
    stop: async () => {
      proc.kill("SIGINT");
      await new Promise((r) => proc.on("exit", r));
    },
  };
}

// waitFor polls f until it answers something truthy.
export async function waitFor(what, f, ms = 60000) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    try {
      last = await f();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`timed out waiting for ${what} (last: ${last})`);
}
