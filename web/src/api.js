// @ts-check
// The HTTP API client of the web interface: every call goes to the
// platform's own origin (/api, /monitor, /inference through the gateway),
// with the session cookie, the CSRF token on anything that changes
// something, and the active team in X-Cosmicac-Team.

import { sseParser } from "./sse.js";

/**
 * @typedef {import("../types/api").components["schemas"]} Schemas
 * @typedef {import("./sse.js").SSEvent} SSEvent
 */

const session = { csrf: "", team: "" };

/** @param {string | null | undefined} token */
export function setCSRF(token) {
  session.csrf = token || "";
}

/** @param {string | null | undefined} team */
export function setTeam(team) {
  session.team = team || "";
}

export function activeTeam() {
  return session.team;
}

// ApiError is an answer other than 2xx: status, the API's code and
// message, and details (per-field errors of a refused spec).
export class ApiError extends Error {
  /**
   * @param {number} status
   * @param {string} code
   * @param {string} message
   * @param {any} [details]
   */
  constructor(status, code, message, details) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details || [];
  }
}

/**
 * @param {string} method
 * @param {Record<string, string>} [extra]
 * @returns {Record<string, string>}
 */
function headers(method, extra) {
  /** @type {Record<string, string>} */
  const h = { Accept: "application/json", ...extra };
  if (session.team && !("X-Cosmicac-Team" in h)) h["X-Cosmicac-Team"] = session.team;
  if (method !== "GET" && method !== "HEAD" && session.csrf) h["X-CSRF-Token"] = session.csrf;
  return h;
}

/** @param {Response} res */
async function errorOf(res) {
  /** @type {Partial<Schemas["ErrorResponse"]> | null} */
  let body = null;
  try {
    body = await res.json();
  } catch {
    // not JSON: a proxy's page
  }
  const e = body && body.error;
  if (e) return new ApiError(res.status, e.code, e.message, e.details);
  return new ApiError(res.status, "http_" + res.status, res.statusText || "request failed");
}

// call sends one request to path (under /api/v1 unless it starts with
// /monitor or /inference) and answers the decoded JSON (null for 204).
// opts: method, body (JSON-encoded), headers, signal, raw (answer the
// Response itself).
/**
 * @typedef {{ method?: string, body?: unknown, headers?: Record<string, string>, signal?: AbortSignal, raw?: boolean }} CallOptions
 * @param {string} path
 * @param {CallOptions} [opts]
 * @returns {Promise<any>}
 */
export async function call(path, opts = {}) {
  const method = opts.method || (opts.body === undefined ? "GET" : "POST");
  const url = path.startsWith("/monitor") || path.startsWith("/inference") ? path : "/api/v1" + path;
  const h = headers(method, opts.headers);
  let body;
  if (opts.body !== undefined) {
    h["Content-Type"] = "application/json";
    body = JSON.stringify(opts.body);
  }
  const res = await fetch(url, { method, headers: h, body, signal: opts.signal, credentials: "same-origin" });
  if (!res.ok) throw await errorOf(res);
  if (opts.raw) return res;
  if (res.status === 204) return null;
  const text = await res.text();
  return text ? JSON.parse(text) : null;
}

// events reads a server-sent event stream (the monitor's logs) with fetch,
// which sends the same headers as every call, and hands each event to
// onEvent({event, id, data}). It returns when the stream ends or signal
// aborts.
/**
 * @param {string} path
 * @param {{ signal?: AbortSignal, lastId?: string | number | null, onEvent: (ev: SSEvent) => void, onOpen?: (res: Response) => void }} opts
 */
export async function events(path, { signal, lastId, onEvent, onOpen }) {
  const h = headers("GET", { Accept: "text/event-stream" });
  if (lastId !== undefined && lastId !== null) h["Last-Event-ID"] = String(lastId);
  const res = await fetch(path, { headers: h, signal, credentials: "same-origin" });
  if (!res.ok) throw await errorOf(res);
  if (onOpen) onOpen(res);
  if (!res.body) return;
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  const feed = sseParser(onEvent);
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    feed(value);
  }
}

// watchJobs follows a job list (query: URLSearchParams of listJobs) with
// the API's watch: each answer is held until the jobs change, and carries
// the version to wait on next. onList gets every list; errors back off.
/**
 * @param {string | URLSearchParams | Record<string, string>} query
 * @param {(list: Schemas["JobList"]) => void} onList
 * @param {(e: unknown) => void} onError
 * @returns {() => void} what stops the watch
 */
export function watchJobs(query, onList, onError) {
  const ctl = new AbortController();
  (async () => {
    let version = "";
    let delay = 500;
    while (!ctl.signal.aborted) {
      const q = new URLSearchParams(query);
      if (version) q.set("watch", version);
      try {
        const res = await call("/jobs?" + q, { signal: ctl.signal, raw: true });
        version = res.headers.get("X-Cosmicac-Jobs-Version") || "";
        onList(await res.json());
        delay = 500;
        if (!version) await sleep(2000, ctl.signal); // an API without watch: poll
      } catch (e) {
        if (ctl.signal.aborted) return;
        onError(e);
        await sleep(delay, ctl.signal);
        delay = Math.min(delay * 2, 10000);
      }
    }
  })();
  return () => ctl.abort();
}

// watchJob follows one job as watchJobs follows a list.
/**
 * @param {string} id
 * @param {(job: Schemas["Job"]) => void} onJob
 * @param {(e: unknown) => void} onError
 * @returns {() => void} what stops the watch
 */
export function watchJob(id, onJob, onError) {
  const ctl = new AbortController();
  (async () => {
    let version = "";
    let delay = 500;
    while (!ctl.signal.aborted) {
      try {
        const res = await call(`/jobs/${encodeURIComponent(id)}` + (version ? `?watch=${encodeURIComponent(version)}` : ""), {
          signal: ctl.signal,
          raw: true,
        });
        version = res.headers.get("X-Cosmicac-Jobs-Version") || "";
        onJob(await res.json());
        delay = 500;
        if (!version) await sleep(2000, ctl.signal);
      } catch (e) {
        if (ctl.signal.aborted) return;
        onError(e);
        if (e instanceof ApiError && e.status === 404) return;
        await sleep(delay, ctl.signal);
        delay = Math.min(delay * 2, 10000);
      }
    }
  })();
  return () => ctl.abort();
}

/**
 * @param {number} ms
 * @param {AbortSignal} signal
 * @returns {Promise<void>}
 */
function sleep(ms, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(t);
      resolve();
    });
  });
}
