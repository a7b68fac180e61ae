import { useEffect, useRef, useState } from "preact/hooks";
import { activeTeam, call, events, watchJob } from "./api.js";
import { Link, navigate } from "./router.jsx";
import { Confirm, Copy, ErrorNotice, Notice, StateBadge, Tabs, Time } from "./ui.jsx";
import { StatusDetail, gpuText } from "./jobs.jsx";
import { can } from "./main.jsx";
import { isPlatformRecord } from "./records.js";
import { endpointSnippets, modelForClients } from "./snippets.js";
import { sseParser } from "./sse.js";

// What the caller may do to a job (or a replica) now is the API's answer,
// status.actions and status.replicas[].actions (absent: nothing): this
// page restates no rule of its own.
const has = (actions, a) => (actions || []).includes(a);

export function JobPage({ me, id, tab }) {
  const [job, setJob] = useState(null);
  const [error, setError] = useState(null);
  useEffect(() => {
    setJob(null);
    return watchJob(id, (j) => { setJob(j); setError(null); }, setError);
  }, [id, me.team]);

  if (!job) {
    if (error && error.status === 404) {
      return (
        <section>
          <h1>Job not found</h1>
          <p>No job {id} in {me.team}. <Link href="/jobs">Back to the jobs</Link></p>
        </section>
      );
    }
    return error ? <ErrorNotice error={error} /> : <p aria-busy="true">Loading job…</p>;
  }
  const inf = job.spec.type === "managed-inference";
  const tabs = [["overview", "Overview"], ["logs", "Logs"]];
  if (!inf) tabs.push(["terminal", "Terminal"]);
  if (inf) tabs.push(["endpoint", "Endpoint"]);
  const base = `/jobs/${id}`;
  return (
    <section aria-labelledby="job-title">
      <p class="crumbs"><Link href="/jobs">Jobs</Link> /</p>
      <div class="heading">
        <h1 id="job-title">{job.spec.name || id.slice(0, 8)} <StateBadge state={job.status.state} /></h1>
        <Actions me={me} job={job} onError={setError} />
      </div>
      <p class="status-line"><StatusDetail status={job.status} /></p>
      <ErrorNotice error={error} />
      <Tabs base={base} tabs={tabs} current={tabs.some(([t]) => t === tab) ? tab : "overview"} />
      {tab === "logs" ? (
        <Logs job={job} />
      ) : tab === "terminal" && !inf ? (
        <TerminalTab me={me} job={job} />
      ) : tab === "endpoint" && inf ? (
        <Endpoint job={job} />
      ) : (
        <Overview me={me} job={job} onError={setError} />
      )}
    </section>
  );
}

function Actions({ me, job, onError }) {
  const [confirm, setConfirm] = useState(null);
  const act = async (path, method = "POST") => {
    try {
      await call(path, { method });
      onError(null);
    } catch (e) {
      onError(e);
    }
  };
  const acts = job.status.actions;
  // A job whose VMs run is deleted only with force: it is killed first.
  const running = has(acts, "forceDelete");
  return (
    <div class="actions" role="group" aria-label="Job actions">
      {has(acts, "restart") && (
        <button type="button" onClick={() => setConfirm("restart")}>Restart</button>
      )}
      {has(acts, "kill") && (
        <button type="button" onClick={() => setConfirm("kill")}>Kill</button>
      )}
      {job.spec.type === "managed-inference" && can(me, "jobs.operate") && ["running", "degraded", "stopped", "failed", "queued"].includes(job.status.state) && !job.status.rollout && (
        <button type="button" onClick={() => navigate(`/jobs/new?update=${job.id}`)}>Update</button>
      )}
      {can(me, "jobs.create") && (
        <button type="button" onClick={() => navigate(`/jobs/new?from=${job.id}`)}>Duplicate</button>
      )}
      {(has(acts, "delete") || running) && (
        <button type="button" class="danger" onClick={() => setConfirm("delete")}>Delete</button>
      )}
      <Confirm
        open={confirm === "restart"}
        title="Restart this job?"
        confirmLabel="Restart"
        onCancel={() => setConfirm(null)}
        onConfirm={() => { setConfirm(null); act(`/jobs/${job.id}/restart`); }}
      >
        <p>{running
          ? "Its VMs stop and start again: what runs in them now is cut off, and its command starts anew. Its storage and GPUs are kept."
          : "It is placed again and starts anew; its storage is kept."}</p>
      </Confirm>
      <Confirm
        open={confirm === "kill"}
        title="Kill this job?"
        confirmLabel="Kill"
        danger
        onCancel={() => setConfirm(null)}
        onConfirm={() => { setConfirm(null); act(`/jobs/${job.id}/kill`); }}
      >
        <p>Its VMs stop and its GPUs are released; its storage is kept, and Restart runs it again.</p>
      </Confirm>
      <Confirm
        open={confirm === "delete"}
        title="Delete this job?"
        confirmLabel="Delete"
        danger
        onCancel={() => setConfirm(null)}
        onConfirm={async () => {
          setConfirm(null);
          try {
            await call(`/jobs/${job.id}${running ? "?force=true" : ""}`, { method: "DELETE" });
            navigate("/jobs");
          } catch (e) {
            onError(e);
          }
        }}
      >
        <p>
          {job.spec.name || job.id} and its storage are removed for good.
          {running && " It is running: it is killed first."}
        </p>
      </Confirm>
    </div>
  );
}

// givenText is what a rack gave a replica: "1 vCPU, 0.5 GiB, 0 GPUs".
function givenText(g) {
  return `${g.cpus} vCPU, ${Math.round((g.memoryMiB / 1024) * 10) / 10} GiB, ${g.gpus} GPU${g.gpus === 1 ? "" : "s"}`;
}

// givenSummary says, after what was asked, what the first replica the
// rack reported got, when it got less.
function givenSummary(job) {
  const r = (job.status.replicas || []).find((x) => x.given);
  if (!r) return "";
  const s = job.spec.resources || {};
  if (r.given.cpus >= (s.cpu || 0) && r.given.memoryMiB >= (s.memory || 0) * 1024 && r.given.gpus >= (s.gpu || 0)) return "";
  return `; the rack gave ${givenText(r.given)} (see Replicas)`;
}

function Overview({ me, job, onError }) {
  const s = job.spec;
  const inf = s.type === "managed-inference";
  const r = s.resources || {};
  return (
    <div class="overview">
      <dl class="facts">
        <dt>ID</dt><dd><code>{job.id}</code></dd>
        <dt>Type</dt><dd>{inf ? "Managed Inference Job" : "GPU Container Job"}</dd>
        <dt>Team</dt><dd>{job.team}</dd>
        <dt>User</dt><dd>{job.user}</dd>
        <dt>Location</dt><dd>{s.location}</dd>
        <dt>GPUs</dt><dd>{gpuText(s)}</dd>
        <dt>CPU / memory</dt><dd>{r.cpu || "—"} cores / {r.memory || "—"} GiB asked{inf ? " a replica" : ""}{givenSummary(job)}</dd>
        {inf ? (
          <>
            <dt>Model</dt><dd>{s.inference.model} ({s.inference.runtime})</dd>
            <dt>Model health</dt><dd><span class={`health h-${job.status.modelHealth || "unknown"}`}>{job.status.modelHealth || "unknown"}</span></dd>
            {job.status.rollout && (
              <>
                <dt>Rolling update</dt>
                <dd>{rolloutText(job)}</dd>
              </>
            )}
            {job.status.lastRollout && (
              <>
                <dt>Last update</dt>
                <dd>
                  generation {job.status.lastRollout.generation} {job.status.lastRollout.outcome.replace("_", " ")} <Time t={job.status.lastRollout.ended} />
                  {job.status.lastRollout.reason && <p class="help">{job.status.lastRollout.reason.message}</p>}
                </dd>
              </>
            )}
          </>
        ) : (
          <>
            <dt>Image</dt><dd>{s.image}</dd>
          </>
        )}
        <dt>Disk</dt><dd>{s.diskGB} GB</dd>
        <dt>Labels</dt>
        <dd>{Object.entries(s.labels || {}).map(([k, v]) => <span class="chip">{k}={v}</span>)}{!s.labels && "—"}</dd>
        <dt>Created</dt><dd><Time t={job.createdAt} /></dd>
      </dl>
      {job.status.replicas && job.status.replicas.length > 0 && <Replicas me={me} job={job} onError={onError} />}
      <h2>Status history</h2>
      <ol class="timeline">
        {(job.status.history || []).map((h) => (
          <li data-state={h.state}>
            <StateBadge state={h.state} /> <time dateTime={h.at}>{new Date(h.at).toLocaleString()}</time> <span class="muted">(<Time t={h.at} />)</span>
            {h.reason && <span class="detail"> {h.reason.message}</span>}
            {h.message && <span class="detail"> {h.message}</span>}
          </li>
        ))}
      </ol>
    </div>
  );
}

// rolloutText says how far a rolling update is: replicas of the new
// generation running, out of the count it ends at.
function rolloutText(job) {
  const ro = job.status.rollout;
  const g = job.status.generation;
  const done = (job.status.replicas || []).filter((r) => r.index < ro.replicas && r.generation === g && r.state === "running").length;
  return `${ro.rollingBack ? "rolling back: " : ""}${done} of ${ro.replicas} replicas run generation ${g}`;
}

function Replicas({ me, job, onError }) {
  const inf = job.spec.type === "managed-inference";
  const [confirm, setConfirm] = useState(null);
  const act = async (path, method) => {
    try {
      await call(path, { method });
      onError(null);
    } catch (e) {
      onError(e);
    }
  };
  return (
    <>
      <h2>Replicas</h2>
      <table class="replicas">
        <thead>
          <tr><th scope="col">Replica</th><th scope="col">Status</th><th scope="col">Nodes</th><th scope="col">Given</th>{inf && can(me, "jobs.operate") && <th scope="col">Actions</th>}</tr>
        </thead>
        <tbody>
          {job.status.replicas.map((r) => (
            <tr data-replica={r.index}>
              <td>{r.index}</td>
              <td>
                <StateBadge state={r.state} /> {r.drain && <span class="detail">draining: it answers what it has and takes no new request.</span>}{" "}
                {r.reason && <span class="detail">{r.reason.message}</span>}
                {job.status.generation > 0 && <span class="muted"> (generation {r.generation || 0})</span>}
              </td>
              <td>{(r.nodes || []).join(", ") || "—"}</td>
              <td class="given">{r.given ? <>{givenText(r.given)}{r.given.note && <span class="detail"> {r.given.note}</span>}</> : "—"}</td>
              {inf && can(me, "jobs.operate") && (
                <td>
                  {has(r.actions, "restart") ? (
                    <>
                      <button type="button" onClick={() => act(`/jobs/${job.id}/replicas/${r.index}/restart`, "POST")}>Restart</button>{" "}
                      <button type="button" class="danger" onClick={() => setConfirm(r.index)}>Delete</button>
                    </>
                  ) : (
                    <span class="muted">—</span>
                  )}
                </td>
              )}
            </tr>
          ))}
        </tbody>
      </table>
      <Confirm
        open={confirm !== null}
        title={`Delete replica ${confirm}?`}
        confirmLabel="Delete replica"
        danger
        onCancel={() => setConfirm(null)}
        onConfirm={() => { const n = confirm; setConfirm(null); act(`/jobs/${job.id}/replicas/${n}`, "DELETE"); }}
      >
        <p>Its VMs, disks and GPUs are removed; the platform places it again, perhaps elsewhere.</p>
      </Confirm>
    </>
  );
}

// MAX_LINES bounds the records kept on the page; older ones scroll away.
const MAX_LINES = 5000;

function Logs({ job }) {
  const [source, setSource] = useState("");
  const [replica, setReplica] = useState("");
  const [since, setSince] = useState("1h");
  const [follow, setFollow] = useState(true);
  const [paused, setPaused] = useState(false);
  const [records, setRecords] = useState([]);
  const [meta, setMeta] = useState(null);
  const [warning, setWarning] = useState("");
  const [error, setError] = useState(null);
  const pausedRef = useRef(false);
  const held = useRef([]);
  const box = useRef(null);
  pausedRef.current = paused;

  useEffect(() => {
    const ctl = new AbortController();
    setRecords([]);
    setMeta(null);
    setWarning("");
    setError(null);
    held.current = [];
    let lastId = null;
    let pending = [];
    let timer = 0;
    const flush = () => {
      timer = 0;
      if (pausedRef.current) {
        held.current.push(...pending);
      } else {
        const add = held.current.concat(pending);
        held.current = [];
        setRecords((rs) => rs.concat(add).slice(-MAX_LINES));
      }
      pending = [];
    };
    (async () => {
      for (let attempt = 0; !ctl.signal.aborted; attempt++) {
        const q = new URLSearchParams({ follow: String(follow) });
        if (source) q.set("source", source);
        if (replica !== "") q.set("replica", replica);
        if (lastId === null && since) q.set("since", since);
        try {
          await events(`/monitor/v1/jobs/${job.id}/logs?${q}`, {
            signal: ctl.signal,
            lastId,
            onEvent: (ev) => {
              if (ev.event === "meta") setMeta(JSON.parse(ev.data));
              else if (ev.event === "record") {
                lastId = ev.id;
                pending.push(JSON.parse(ev.data));
                if (!timer) timer = setTimeout(flush, 50);
              } else if (ev.event === "warning") setWarning(JSON.parse(ev.data).message);
              else if (ev.event === "cutoff") setWarning(JSON.parse(ev.data).message);
            },
          });
          if (!follow) return;
        } catch (e) {
          if (ctl.signal.aborted) return;
          setError(e);
          if (e.status && e.status < 500) return;
        }
        await new Promise((r) => setTimeout(r, Math.min(1000 * 2 ** attempt, 10000)));
      }
    })();
    return () => { ctl.abort(); clearTimeout(timer); };
  }, [job.id, source, replica, since, follow]);

  useEffect(() => {
    if (!paused && held.current.length) {
      const add = held.current;
      held.current = [];
      setRecords((rs) => rs.concat(add).slice(-MAX_LINES));
    }
  }, [paused]);

  useEffect(() => {
    const b = box.current;
    if (b && follow && !paused) b.scrollTop = b.scrollHeight;
  }, [records]);

  const replicas = (job.status.replicas || []).map((r) => r.index);
  return (
    <div class="logs">
      <form class="filters" onSubmit={(e) => e.preventDefault()}>
        <div>
          <label for="log-source">Source</label>
          <select id="log-source" value={source} onChange={(e) => setSource(e.currentTarget.value)}>
            <option value="">All</option>
            <option value="system">System</option>
            <option value="application">Application</option>
          </select>
        </div>
        <div>
          <label for="log-replica">Replica</label>
          <select id="log-replica" value={replica} onChange={(e) => setReplica(e.currentTarget.value)}>
            <option value="">All</option>
            {replicas.map((n) => <option value={String(n)}>{n}</option>)}
          </select>
        </div>
        <div>
          <label for="log-since">History</label>
          <select id="log-since" value={since} onChange={(e) => setSince(e.currentTarget.value)}>
            <option value="">None (live only)</option>
            <option value="15m">15 minutes</option>
            <option value="1h">1 hour</option>
            <option value="24h">24 hours</option>
            <option value="168h">7 days</option>
          </select>
        </div>
        <label class="check"><input type="checkbox" checked={follow} onChange={(e) => setFollow(e.currentTarget.checked)} /> Follow</label>
        <button type="button" onClick={() => setPaused(!paused)} aria-pressed={paused} disabled={!follow}>{paused ? "Resume" : "Pause"}</button>
      </form>
      {meta && meta.history === "buffer-only" && (
        <Notice>Live only: this platform has no Loki, so the history is what the monitor still holds in memory{meta.partial ? "; older records are not shown" : ""}.</Notice>
      )}
      {meta && meta.history === "loki" && <p class="muted">History from Loki, then live.</p>}
      {warning && <Notice kind="warn">{warning}</Notice>}
      <ErrorNotice error={error} />
      {paused && <p class="muted" role="status">Paused: new records are held until you resume.</p>}
      <div class="logbox" ref={box} tabIndex={0} role="log" aria-label="Job logs" aria-live="off">
        {records.length === 0 ? (
          <p class="muted">No records yet.</p>
        ) : (
          records.map((r) => <LogLine r={r} replicas={replicas} />)
        )}
      </div>
    </div>
  );
}

// LogLine is one log record. A platform record shows its setup step as one;
// any other (the job's output, or a system record its agent wrote) is
// marked as the job's VM's, and a step it names is only its text.
function LogLine({ r, replicas }) {
  const platform = isPlatformRecord(r);
  return (
    <div class={`rec src-${r.source}${platform ? "" : " from-vm"}${r.ok === false ? " bad" : ""}`}>
      <time dateTime={r.time}>{new Date(r.time).toLocaleTimeString()}</time>
      <span class="tag">{r.source === "system" ? "sys" : "app"}{replicas.length > 1 ? ` r${r.replica}` : ""}</span>
      {platform && r.step && <span class="step">{r.step}</span>}
      {!platform && r.source === "system" && (
        <span class="origin" title="Written inside the job's VM (by its agent), not by the platform">from the job's VM</span>
      )}
      {!platform && r.step && <span class="vm-step">{r.step}:</span>}
      <span class="line">{r.line}</span>
    </div>
  );
}

function TerminalTab({ me, job }) {
  const host = useRef(null);
  const [state, setState] = useState("connecting");
  const [replica, setReplica] = useState(0);
  const [gen, setGen] = useState(0);
  const allowed = can(me, "jobs.connect");
  const running = job.status.state === "running";
  useEffect(() => {
    if (!allowed || !running || !host.current) return;
    let stop = () => {};
    let gone = false;
    setState("connecting");
    import("./terminal.js").then(({ openTerminal }) => {
      if (gone) return;
      stop = openTerminal(host.current, { jobID: job.id, replica, team: activeTeam(), onState: setState });
    });
    return () => { gone = true; stop(); };
  }, [job.id, replica, running, allowed, gen]);
  if (!allowed) return <Notice>Your role in {me.team} cannot open a shell in this job.</Notice>;
  if (!running) return <Notice>The terminal opens when the job is Active.</Notice>;
  return (
    <div class="terminal-tab">
      <div class="filters">
        {(job.status.replicas || []).length > 1 && (
          <div>
            <label for="term-replica">Replica</label>
            <select id="term-replica" value={replica} onChange={(e) => setReplica(Number(e.currentTarget.value))}>
              {job.status.replicas.map((r) => <option value={r.index}>{r.index}</option>)}
            </select>
          </div>
        )}
        <span class="muted" role="status">{state}</span>
        {state !== "connected" && state !== "connecting" && <button type="button" onClick={() => setGen(gen + 1)}>Reconnect</button>}
      </div>
      <div class="term" ref={host} aria-label="Terminal" />
    </div>
  );
}

function Endpoint({ job }) {
  const inf = job.spec.inference;
  const name = inf.servedModelName || inf.model;
  const auth = inf.requireAuth !== false;
  // The name clients call: an open model by anyone, by its full name.
  const model = modelForClients({ team: job.team, name, requireAuth: auth });
  const base = `${location.origin}/inference/v1`;
  const asr = inf.runtime === "parakeet";
  const { curl, python, js } = endpointSnippets({ base, model, auth, asr });
  return (
    <div class="endpoint">
      <dl class="facts">
        <dt>Base URL</dt><dd><code>{base}</code></dd>
        <dt>Model</dt>
        <dd>
          <code>{model}</code>
          {!auth && <p class="help">The full name: anyone may call it, with any key or none. {job.team}'s own API keys may also use the bare name, <code>{name}</code>.</p>}
        </dd>
        <dt>Authorization</dt>
        <dd>{auth ? <>an API key of {job.team} (<Link href="/team/keys">API keys</Link>)</> : "none required"}</dd>
        {inf.adapters && inf.adapters.length > 0 && (
          <>
            <dt>LoRA adapters</dt>
            <dd>{inf.adapters.map((a) => <code key={a.name}>{`${model}:${a.name}`} </code>)}</dd>
          </>
        )}
        <dt>Routing</dt>
        <dd>{inf.routing === "least-outstanding" ? "least outstanding requests" : "prefix cache, bounded by load"}</dd>
        {inf.autoscaling && (
          <>
            <dt>Autoscaling</dt>
            <dd>
              {inf.autoscaling.minReplicas}–{inf.autoscaling.maxReplicas} replicas, {inf.autoscaling.targetInFlight ?? 4} requests per replica,
              scale-down after {inf.autoscaling.scaleDownDelay ?? 300} s; now {inf.replicas ?? 0}
              {(inf.replicas ?? 0) === 0 && <p class="help">No replica runs and no GPU is held: the next request starts one and waits for it.</p>}
            </dd>
          </>
        )}
      </dl>
      <h2>curl</h2>
      <Copy text={curl} label="curl" />
      <h2>OpenAI SDK for Python</h2>
      <Copy text={python} label="Python" />
      <h2>OpenAI SDK for JavaScript</h2>
      <Copy text={js} label="JavaScript" />
      <h2>Playground</h2>
      {job.status.state !== "running" && job.status.state !== "degraded" ? (
        <Notice>The playground works when the job is Active.</Notice>
      ) : asr ? (
        <Transcribe base={base} model={model} auth={auth} />
      ) : (
        <Chat base={base} model={model} auth={auth} />
      )}
    </div>
  );
}

function KeyField({ auth, value, onInput }) {
  if (!auth) return null;
  return (
    <div class="field">
      <label for="pg-key">API key</label>
      <input id="pg-key" type="password" autoComplete="off" value={value} onInput={(e) => onInput(e.currentTarget.value)} placeholder="sk-…" />
      <p class="help">Kept in this page only.</p>
    </div>
  );
}

function Chat({ base, model, auth }) {
  const [key, setKey] = useState("");
  const [prompt, setPrompt] = useState("Hello!");
  const [out, setOut] = useState("");
  const [err, setErr] = useState("");
  const [busy, setBusy] = useState(false);
  const send = async (e) => {
    e.preventDefault();
    setBusy(true);
    setOut("");
    setErr("");
    try {
      const res = await fetch(`${base}/chat/completions`, {
        method: "POST",
        credentials: "omit", // the endpoint takes API keys, never the session
        headers: { "Content-Type": "application/json", ...(auth ? { Authorization: `Bearer ${key}` } : {}) },
        body: JSON.stringify({ model, stream: true, max_tokens: 128, messages: [{ role: "user", content: prompt }] }),
      });
      if (!res.ok) {
        const b = await res.json().catch(() => ({}));
        throw new Error((b.error && b.error.message) || res.statusText);
      }
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      const feed = sseParser(({ data }) => {
        if (data === "[DONE]") return;
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message);
        const delta = j.choices && j.choices[0] && j.choices[0].delta && j.choices[0].delta.content;
        if (delta) setOut((o) => o + delta);
      });
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        feed(value);
      }
    } catch (e2) {
      setErr(e2.message);
    } finally {
      setBusy(false);
    }
  };
  return (
    <form class="playground" onSubmit={send}>
      <KeyField auth={auth} value={key} onInput={setKey} />
      <div class="field">
        <label for="pg-prompt">Message</label>
        <textarea id="pg-prompt" rows={3} value={prompt} onInput={(e) => setPrompt(e.currentTarget.value)} />
      </div>
      <button type="submit" class="primary" disabled={busy}>{busy ? "Answering…" : "Send"}</button>
      <ErrorNotice error={err} />
      <div class="answer" role="status" aria-live="polite" aria-label="Answer">{out}</div>
    </form>
  );
}

function Transcribe({ base, model, auth }) {
  const [key, setKey] = useState("");
  const [out, setOut] = useState("");
  const [err, setErr] = useState("");
  const [busy, setBusy] = useState(false);
  const send = async (e) => {
    e.preventDefault();
    const file = e.currentTarget.elements.audio.files[0];
    if (!file) return setErr("Choose an audio file.");
    setBusy(true);
    setErr("");
    setOut("");
    try {
      const fd = new FormData();
      fd.set("model", model);
      fd.set("file", file);
      const res = await fetch(`${base}/audio/transcriptions`, { method: "POST", credentials: "omit", headers: auth ? { Authorization: `Bearer ${key}` } : {}, body: fd });
      const b = await res.json();
      if (!res.ok) throw new Error((b.error && b.error.message) || res.statusText);
      setOut(b.text);
    } catch (e2) {
      setErr(e2.message);
    } finally {
      setBusy(false);
    }
  };
  return (
    <form class="playground" onSubmit={send}>
      <KeyField auth={auth} value={key} onInput={setKey} />
      <div class="field">
        <label for="pg-audio">Audio file</label>
        <input id="pg-audio" name="audio" type="file" accept="audio/*" />
      </div>
      <button type="submit" class="primary" disabled={busy}>{busy ? "Transcribing…" : "Transcribe"}</button>
      <ErrorNotice error={err} />
      <div class="answer" role="status" aria-live="polite" aria-label="Transcript">{out}</div>
    </form>
  );
}
