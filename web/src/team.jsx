import { useMemo, useState } from "preact/hooks";
import { call } from "./api.js";
import { Confirm, Copy, ErrorNotice, Notice, Tabs, Time, useAsync } from "./ui.jsx";
import { can } from "./main.jsx";
import { Link } from "./router.jsx";
import { compact, csvHref, tokensByDay, usageFrom } from "./usage.js";

export function TeamPage({ me, tab }) {
  const tabs = [["members", "Members"], ["quotas", "Quotas & usage"]];
  if (can(me, "audit.read")) tabs.push(["audit", "Audit log"]);
  if (can(me, "account.manage")) tabs.push(["tokens", "Access tokens"]);
  if (can(me, "apikeys.create")) tabs.push(["keys", "API keys"]);
  if (can(me, "datastores.read")) tabs.push(["datastores", "Datastores"]);
  if (can(me, "jobs.read")) tabs.push(["volumes", "Volumes"]);
  const current = tabs.some(([t]) => t === tab) ? tab : "members";
  return (
    <section aria-labelledby="team-title">
      <h1 id="team-title">Team {me.team} <span class="muted">you are {me.platformAdmin && me.role !== "owner" ? "a platform admin" : me.role}</span></h1>
      <Tabs base="/team" tabs={tabs} current={current} />
      {current === "members" && <Members me={me} />}
      {current === "quotas" && <Quotas me={me} />}
      {current === "audit" && <Audit me={me} />}
      {current === "tokens" && <Tokens me={me} />}
      {current === "keys" && <APIKeys me={me} />}
      {current === "datastores" && <Datastores me={me} />}
      {current === "volumes" && <Volumes me={me} />}
    </section>
  );
}

const ROLES = ["viewer", "member", "admin", "owner"];

function Members({ me }) {
  const team = encodeURIComponent(me.team);
  const [list, reload] = useAsync(() => call(`/teams/${team}/members`), [me.team]);
  const [err, setErr] = useState(null);
  const [remove, setRemove] = useState(null);
  const manage = can(me, "members.manage");
  const put = async (user, role) => {
    try {
      await call(`/teams/${team}/members/${encodeURIComponent(user)}`, { method: "PUT", body: { role } });
      setErr(null);
      reload();
    } catch (e) {
      setErr(e);
    }
  };
  const add = (e) => {
    e.preventDefault();
    const f = new FormData(e.currentTarget);
    put(String(f.get("user")).trim(), f.get("role"));
    e.currentTarget.reset();
  };
  return (
    <div>
      <ErrorNotice error={list.error || err} />
      {list.value && (
        <table>
          <thead><tr><th scope="col">User</th><th scope="col">Role</th>{manage && <th scope="col">Actions</th>}</tr></thead>
          <tbody>
            {list.value.items.map((m) => (
              <tr data-member={m.user}>
                <td>{m.user}</td>
                <td>
                  {manage ? (
                    <select aria-label={`Role of ${m.user}`} value={m.role} onChange={(e) => put(m.user, e.currentTarget.value)}>
                      {ROLES.map((r) => <option value={r} disabled={r === "owner" && !can(me, "owners.manage")}>{r}</option>)}
                    </select>
                  ) : (
                    m.role
                  )}
                </td>
                {manage && <td><button type="button" class="danger" onClick={() => setRemove(m.user)}>Remove</button></td>}
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {manage && (
        <form class="inline" onSubmit={add} aria-label="Add a member">
          <div class="field"><label for="m-user">User</label><input id="m-user" name="user" required /></div>
          <div class="field">
            <label for="m-role">Role</label>
            <select id="m-role" name="role">{ROLES.map((r) => <option value={r} selected={r === "member"}>{r}</option>)}</select>
          </div>
          <button type="submit" class="primary">Add member</button>
        </form>
      )}
      <Confirm
        open={remove !== null}
        title={`Remove ${remove} from ${me.team}?`}
        confirmLabel="Remove"
        danger
        onCancel={() => setRemove(null)}
        onConfirm={async () => {
          const u = remove;
          setRemove(null);
          try {
            await call(`/teams/${team}/members/${encodeURIComponent(u)}`, { method: "DELETE" });
            reload();
          } catch (e) {
            setErr(e);
          }
        }}
      >
        <p>Their jobs stay; they lose access to the team.</p>
      </Confirm>
    </div>
  );
}

// HELD are the states in which a job holds GPUs.
const HELD = new Set(["pending", "starting", "running", "degraded", "restarting", "unknown"]);
const HOURS = 24;
const STEPS = 48;

// usage computes GPUs held per team over the last day from the jobs'
// status histories: each job holds its GPUs while in a HELD state.
export function usage(jobs, now = Date.now()) {
  const start = now - HOURS * 3600e3;
  const step = (HOURS * 3600e3) / STEPS;
  const teams = {};
  for (const j of jobs) {
    const r = j.spec.resources || {};
    const gpus = (r.gpu || 0) * (j.spec.type === "managed-inference" ? (j.spec.inference && j.spec.inference.replicas) || 1 : 1);
    if (!gpus) continue;
    const series = teams[j.team] || (teams[j.team] = new Array(STEPS + 1).fill(0));
    const h = j.status.history || [];
    for (let i = 0; i < h.length; i++) {
      if (!HELD.has(h[i].state)) continue;
      const from = new Date(h[i].at).getTime();
      // The last state lasts on: it holds at now too (the chart's "now").
      const to = i + 1 < h.length ? new Date(h[i + 1].at).getTime() : Infinity;
      for (let k = 0; k <= STEPS; k++) {
        const t = start + k * step;
        if (t >= from && t < to) series[k] += gpus;
      }
    }
  }
  return { start, step, teams };
}

const COLORS = ["#2f6fde", "#d2592a", "#2a9d5b", "#9b51c9", "#c7a008", "#d6336c", "#1098ad", "#666"];

function UsageChart({ data }) {
  const names = Object.keys(data.teams).sort();
  const max = Math.max(1, ...names.flatMap((n) => data.teams[n]));
  const W = 640;
  const H = 200;
  const P = 32;
  const x = (k) => P + (k / STEPS) * (W - 2 * P);
  const y = (v) => H - P - (v / max) * (H - 2 * P);
  if (!names.length) return <p class="empty">No GPUs held in the last {HOURS} hours.</p>;
  const summary = names.map((n) => `${n}: now ${data.teams[n][STEPS]}, peak ${Math.max(...data.teams[n])}`).join("; ");
  return (
    <figure class="chart gpus">
      <svg viewBox={`0 0 ${W} ${H}`} role="img" aria-label={`GPUs held per team over the last ${HOURS} hours. ${summary}`}>
        <line x1={P} y1={H - P} x2={W - P} y2={H - P} class="axis" />
        <line x1={P} y1={P} x2={P} y2={H - P} class="axis" />
        <text x={P - 4} y={y(max) + 4} class="tick" text-anchor="end">{max}</text>
        <text x={P - 4} y={H - P + 4} class="tick" text-anchor="end">0</text>
        <text x={P} y={H - 8} class="tick">-{HOURS}h</text>
        <text x={W - P} y={H - 8} class="tick" text-anchor="end">now</text>
        {names.map((n, i) => (
          <polyline fill="none" stroke={COLORS[i % COLORS.length]} stroke-width="2" points={data.teams[n].map((v, k) => `${x(k)},${y(v)}`).join(" ")} />
        ))}
      </svg>
      <figcaption>
        {names.map((n, i) => <span class="legend"><span class="swatch" style={{ background: COLORS[i % COLORS.length] }} /> {n}</span>)}
      </figcaption>
    </figure>
  );
}

function Quotas({ me }) {
  const team = encodeURIComponent(me.team);
  const all = can(me, "quotas.set");
  const [quotas] = useAsync(() => call(all ? "/quotas" : `/teams/${team}/quotas`), [me.team]);
  // A platform admin's usage is every team's: the team * goes in the team
  // header, in place of the active team (the API refuses a team given both
  // as the header and as ?team=).
  const [jobs] = useAsync(() => call("/jobs?size=1000", all ? { headers: { "X-Cosmicac-Team": "*" } } : {}), [me.team]);
  const data = useMemo(() => (jobs.value ? usage(jobs.value.items) : null), [jobs.value]);
  return (
    <div>
      <ErrorNotice error={quotas.error || jobs.error} />
      <h2>Quotas</h2>
      {quotas.value && quotas.value.items.length === 0 && <p class="empty">No quotas: {all ? "no team is" : `${me.team} is not`} limited.</p>}
      {quotas.value && quotas.value.items.length > 0 && (
        <table class="quotas">
          <thead><tr><th scope="col">Team</th><th scope="col">Location</th><th scope="col">GPU model</th><th scope="col">Used / quota</th></tr></thead>
          <tbody>
            {quotas.value.items.map((q) => (
              <tr>
                <td>{q.team}</td>
                <td>{q.location}</td>
                <td>{q.gpuModel || "any"}</td>
                <td>
                  <meter min="0" max={q.gpus} value={q.used} aria-label={`${q.used} of ${q.gpus} GPUs`} /> {q.used} / {q.gpus}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <h2>GPU use, last {HOURS} hours</h2>
      {data && <UsageChart data={data} />}
      <p class="help">From the jobs' status histories{all ? ", every team" : `, ${me.team}`}; a job holds its GPUs from pending until it stops.</p>
      {can(me, "usage.read") && <InferenceUsage me={me} all={all} />}
    </div>
  );
}

const DAYS = 30;

// InferenceUsage is the team's inference usage (GET /api/v1/usage): tokens per
// day over the last DAYS days, and by key and model, with the CSV export.
function InferenceUsage({ me, all }) {
  const team = all ? "*" : me.team;
  const opts = all ? { headers: { "X-Cosmicac-Team": "*" } } : {};
  const from = encodeURIComponent(usageFrom(DAYS));
  const [daily] = useAsync(() => call(`/usage?groupBy=day&from=${from}`, opts), [me.team]);
  const [byKey] = useAsync(() => call(`/usage?groupBy=${all ? "team," : ""}key,model&from=${from}`, opts), [me.team]);
  const days = useMemo(() => (daily.value ? tokensByDay(daily.value.items, DAYS) : null), [daily.value]);
  return (
    <div>
      <h2>Inference tokens and GPU hours, last {DAYS} days</h2>
      <ErrorNotice error={daily.error || byKey.error} />
      {days && <TokensChart days={days} total={daily.value.total} />}
      {byKey.value && byKey.value.items.length > 0 && (
        <table class="usage">
          <thead><tr>{all && <th scope="col">Team</th>}<th scope="col">API key</th><th scope="col">Model</th><th scope="col" class="num">Requests</th><th scope="col" class="num">Prompt tokens</th><th scope="col" class="num">Completion tokens</th><th scope="col" class="num">GPU hours</th></tr></thead>
          <tbody>
            {byKey.value.items.map((u) => (
              <tr>
                {all && <td>{u.team}</td>}
                <td>{u.keyId ? (u.keyName || u.keyId) : <em>{u.requests ? "no key" : "GPUs held"}</em>}</td>
                <td>{u.model}</td>
                <td class="num">{u.requests}</td>
                <td class="num">{u.promptTokens}</td>
                <td class="num">{u.completionTokens}</td>
                <td class="num">{(u.gpuSeconds / 3600).toFixed(2)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <p class="help">
        Tokens: what the engines counted in their answers, metered by proxy-inference and paid by the API key's team{all ? ", every team" : ""};
        GPU hours: what each job held, sampled by the ork.{" "}
        <a href={csvHref(team, DAYS)} download>Download CSV</a> (by day, key and model).
      </p>
    </div>
  );
}

// TokensChart draws the days' prompt and completion tokens as stacked bars.
function TokensChart({ days, total }) {
  if (!total || total.requests === 0) return <p class="empty">No inference requests in the last {DAYS} days.</p>;
  const W = 640;
  const H = 200;
  const P = 40;
  const max = Math.max(1, ...days.map((d) => d.prompt + d.completion));
  const bw = (W - 2 * P) / days.length;
  const y = (v) => H - P - (v / max) * (H - 2 * P);
  const label = `Inference tokens per day over the last ${DAYS} days: ${total.totalTokens} in all (${total.promptTokens} prompt, ${total.completionTokens} completion) in ${total.requests} requests`;
  return (
    <figure class="chart tokens">
      <svg viewBox={`0 0 ${W} ${H}`} role="img" aria-label={label}>
        <line x1={P} y1={H - P} x2={W - P} y2={H - P} class="axis" />
        <line x1={P} y1={P} x2={P} y2={H - P} class="axis" />
        <text x={P - 4} y={y(max) + 4} class="tick" text-anchor="end">{compact(max)}</text>
        <text x={P - 4} y={H - P + 4} class="tick" text-anchor="end">0</text>
        <text x={P} y={H - 8} class="tick">{days[0].day}</text>
        <text x={W - P} y={H - 8} class="tick" text-anchor="end">today</text>
        {days.map((d, i) => (
          <g>
            <title>{`${d.day}: ${d.prompt} prompt, ${d.completion} completion tokens, ${d.requests} requests`}</title>
            <rect x={P + i * bw + 1} y={y(d.prompt)} width={Math.max(bw - 2, 1)} height={H - P - y(d.prompt)} fill={COLORS[0]} />
            <rect x={P + i * bw + 1} y={y(d.prompt + d.completion)} width={Math.max(bw - 2, 1)} height={y(d.prompt) - y(d.prompt + d.completion)} fill={COLORS[1]} />
          </g>
        ))}
      </svg>
      <figcaption>
        <span class="legend"><span class="swatch" style={{ background: COLORS[0] }} /> prompt</span>
        <span class="legend"><span class="swatch" style={{ background: COLORS[1] }} /> completion</span>
      </figcaption>
    </figure>
  );
}

function Audit({ me }) {
  const [before, setBefore] = useState("");
  const [list] = useAsync(() => call(`/audit?limit=100${before ? `&before=${before}` : ""}`), [me.team, before]);
  return (
    <div>
      <ErrorNotice error={list.error} />
      {list.value && (
        <>
          <table class="audit">
            <thead><tr><th scope="col">When</th><th scope="col">User</th><th scope="col">Action</th><th scope="col">Target</th><th scope="col">Outcome</th><th scope="col">From</th></tr></thead>
            <tbody>
              {list.value.items.map((a) => (
                <tr>
                  <td><Time t={a.at} /></td>
                  <td>{a.user || "—"}</td>
                  <td>{a.action}</td>
                  <td><code>{a.target}</code></td>
                  <td class={a.outcome === "ok" ? "" : "bad"}>{a.outcome} ({a.status})</td>
                  <td>{a.remote}</td>
                </tr>
              ))}
            </tbody>
          </table>
          {list.value.next ? <button type="button" onClick={() => setBefore(String(list.value.next))}>Older</button> : null}
        </>
      )}
    </div>
  );
}

// Secret shows a secret once, and goes only when the user says it is saved.
function Secret({ what, secret, onDone }) {
  const [saved, setSaved] = useState(false);
  return (
    <div class="card secret" role="region" aria-label={`New ${what}`}>
      <Notice kind="warn">This is the only time the {what} is shown. Copy it now.</Notice>
      <Copy text={secret} label={`The new ${what}`} />
      <label class="check"><input type="checkbox" checked={saved} onChange={(e) => setSaved(e.currentTarget.checked)} /> I have saved the {what}</label>
      <button type="button" class="primary" disabled={!saved} onClick={onDone}>Done</button>
    </div>
  );
}

function Tokens({ me }) {
  const [list, reload] = useAsync(() => call("/tokens"), [me.team]);
  const [secret, setSecret] = useState("");
  const [err, setErr] = useState(null);
  const [revoke, setRevoke] = useState(null);
  const create = async (e) => {
    e.preventDefault();
    const form = e.currentTarget; // gone from the event after an await
    const f = new FormData(form);
    const body = { name: f.get("name"), expiresIn: f.get("expiresIn") || undefined };
    if (f.get("bind")) body.team = me.team;
    if (f.get("scope")) {
      body.scope = f.get("scope");
      body.team = me.team;
    }
    try {
      const t = await call("/tokens", { body });
      setSecret(t.token);
      setErr(null);
      form.reset();
      reload();
    } catch (e2) {
      setErr(e2);
    }
  };
  return (
    <div>
      <ErrorNotice error={list.error || err} />
      {secret && <Secret what="token" secret={secret} onDone={() => setSecret("")} />}
      {list.value && (
        <table>
          <thead><tr><th scope="col">ID</th><th scope="col">Name</th><th scope="col">Team</th><th scope="col">Scope</th><th scope="col">Expires</th><th scope="col">Last used</th><th scope="col">Actions</th></tr></thead>
          <tbody>
            {list.value.items.map((t) => (
              <tr>
                <td><code>{t.id}</code></td>
                <td>{t.name}</td>
                <td>{t.team || "any"}</td>
                <td>{t.scope || "full"}</td>
                <td>{t.expiresAt ? new Date(t.expiresAt).toLocaleDateString() : "never"}</td>
                <td><Time t={t.lastUsedAt} /></td>
                <td><button type="button" class="danger" onClick={() => setRevoke(t.id)}>Revoke</button></td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <form class="inline" onSubmit={create} aria-label="Create an access token">
        <div class="field"><label for="t-name">Name</label><input id="t-name" name="name" required /></div>
        <div class="field">
          <label for="t-exp">Expires in</label>
          <select id="t-exp" name="expiresIn"><option value="24h">1 day</option><option value="720h">30 days</option><option value="" selected>90 days</option><option value="8760h">1 year</option></select>
        </div>
        <div class="field">
          <label for="t-scope">Scope</label>
          <select id="t-scope" name="scope"><option value="">full</option><option value="read">read ({me.team} only)</option><option value="operator">operator ({me.team} only)</option></select>
        </div>
        <label class="check"><input type="checkbox" name="bind" /> Only {me.team}</label>
        <button type="submit" class="primary">Create token</button>
      </form>
      <Confirm open={revoke !== null} title={`Revoke token ${revoke}?`} confirmLabel="Revoke" danger onCancel={() => setRevoke(null)}
        onConfirm={async () => { const id = revoke; setRevoke(null); try { await call(`/tokens/${encodeURIComponent(id)}`, { method: "DELETE" }); reload(); } catch (e) { setErr(e); } }}>
        <p>It stops working at once.</p>
      </Confirm>
    </div>
  );
}

function keyStatus(k) {
  const now = Date.now();
  if (k.expiresAt && new Date(k.expiresAt).getTime() <= now) return "expired";
  if (k.previousExpiresAt && new Date(k.previousExpiresAt).getTime() > now) return "rotating";
  return "active";
}

function APIKeys({ me }) {
  const [list, reload] = useAsync(() => call("/api-keys"), [me.team]);
  const [secret, setSecret] = useState("");
  const [err, setErr] = useState(null);
  const [revoke, setRevoke] = useState(null);
  const create = async (e) => {
    e.preventDefault();
    const form = e.currentTarget;
    const f = new FormData(form);
    const models = String(f.get("models") || "").split(/[\s,]+/).filter(Boolean);
    const body = { name: f.get("name") };
    if (models.length) body.models = models;
    if (f.get("expiresIn")) body.expiresIn = f.get("expiresIn");
    try {
      const k = await call("/api-keys", { body });
      setSecret(k.key);
      setErr(null);
      form.reset();
      reload();
    } catch (e2) {
      setErr(e2);
    }
  };
  return (
    <div>
      <p class="help">
        Keys of {me.team} for the OpenAI-compatible API at <code>{location.origin}/inference/v1</code>; a key reaches the team's models only.
        {can(me, "apikeys.manage") ? " You see every key of the team." : " You see the keys you made; the team's admins see every key."}
      </p>
      <ErrorNotice error={list.error || err} />
      {secret && <Secret what="key" secret={secret} onDone={() => setSecret("")} />}
      {list.value && (
        <table class="keys">
          <thead><tr><th scope="col">ID</th><th scope="col">Name</th><th scope="col">Status</th><th scope="col">Models</th><th scope="col">Last used</th><th scope="col">Actions</th></tr></thead>
          <tbody>
            {list.value.items.map((k) => (
              <tr data-key={k.id}>
                <td><code>{k.id}</code></td>
                <td>{k.name}</td>
                <td>{keyStatus(k)}</td>
                <td>{(k.models || []).join(", ") || "all"}</td>
                <td><Time t={k.lastUsedAt} /></td>
                <td><button type="button" class="danger" onClick={() => setRevoke(k.id)}>Revoke</button></td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {list.value && list.value.items.length === 0 && <p class="empty">No API keys.</p>}
      <form class="inline" onSubmit={create} aria-label="Create an API key">
        <div class="field"><label for="k-name">Name</label><input id="k-name" name="name" required /></div>
        <div class="field"><label for="k-models">Models</label><input id="k-models" name="models" placeholder="all" /></div>
        <div class="field">
          <label for="k-exp">Expires in</label>
          <select id="k-exp" name="expiresIn"><option value="">never</option><option value="720h">30 days</option><option value="2160h">90 days</option></select>
        </div>
        <button type="submit" class="primary">Create key</button>
      </form>
      <Confirm open={revoke !== null} title={`Revoke key ${revoke}?`} confirmLabel="Revoke" danger onCancel={() => setRevoke(null)}
        onConfirm={async () => { const id = revoke; setRevoke(null); try { await call(`/api-keys/${encodeURIComponent(id)}`, { method: "DELETE" }); reload(); } catch (e) { setErr(e); } }}>
        <p>It stops working within a second.</p>
      </Confirm>
    </div>
  );
}

// Datastores are the team's object storage endpoints (docs/data.md): every
// member reads them, admins add and remove them. The secret key is sent
// once and never comes back: the form forgets it as soon as it is sent.
function Datastores({ me }) {
  const [list, reload] = useAsync(() => call("/datastores"), [me.team]);
  const [err, setErr] = useState(null);
  const [remove, setRemove] = useState(null);
  const manage = can(me, "datastores.manage");
  const add = async (e) => {
    e.preventDefault();
    const form = e.currentTarget;
    const f = new FormData(form);
    const body = { alias: f.get("alias"), endpoint: f.get("endpoint"),
      credentials: { accessKey: f.get("accessKey"), secretKey: f.get("secretKey") } };
    if (f.get("region")) body.region = f.get("region");
    form.elements.secretKey.value = "";
    try {
      await call("/datastores", { body });
      setErr(null);
      form.reset();
      reload();
    } catch (e2) {
      setErr(e2);
    }
  };
  return (
    <div>
      <p class="help">
        Object storage endpoints of {me.team} (S3-compatible) that jobs' volumes name by alias. Secret keys are never shown:
        the platform keeps them sealed and gives jobs short-lived signed requests.
        {manage ? "" : " The team's admins add and remove them."}
      </p>
      <ErrorNotice error={list.error || err} />
      {list.value && list.value.items.length > 0 && (
        <table class="datastores">
          <thead><tr><th scope="col">Alias</th><th scope="col">Endpoint</th><th scope="col">Region</th><th scope="col">Access key</th><th scope="col">Added by</th><th scope="col">Credentials changed</th>{manage && <th scope="col">Actions</th>}</tr></thead>
          <tbody>
            {list.value.items.map((d) => (
              <tr data-datastore={d.alias}>
                <td><code>{d.alias}</code></td>
                <td><code>{d.endpoint}</code></td>
                <td>{d.region}</td>
                <td><code>{d.accessKeyHint || "…"}</code></td>
                <td>{d.createdBy}</td>
                <td>{d.updatedAt ? <Time t={d.updatedAt} /> : "never"}</td>
                {manage && <td><button type="button" class="danger" onClick={() => setRemove(d.alias)}>Remove</button></td>}
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {list.value && list.value.items.length === 0 && <p class="empty">No datastores.</p>}
      {manage && (
        <form class="inline" onSubmit={add} aria-label="Add a datastore">
          <div class="field"><label for="ds-alias">Alias</label><input id="ds-alias" name="alias" required pattern="[a-z0-9][a-z0-9._\-]*" /></div>
          <div class="field"><label for="ds-endpoint">Endpoint</label><input id="ds-endpoint" name="endpoint" type="url" required placeholder="https://s3.example.net" /></div>
          <div class="field"><label for="ds-region">Region</label><input id="ds-region" name="region" placeholder="us-east-1" /></div>
          <div class="field"><label for="ds-access">Access key</label><input id="ds-access" name="accessKey" required autocomplete="off" /></div>
          <div class="field"><label for="ds-secret">Secret key</label><input id="ds-secret" name="secretKey" type="password" required autocomplete="new-password" /></div>
          <button type="submit" class="primary">Add datastore</button>
        </form>
      )}
      <Confirm open={remove !== null} title={`Remove datastore ${remove}?`} confirmLabel="Remove" danger onCancel={() => setRemove(null)}
        onConfirm={async () => { const a = remove; setRemove(null); try { await call(`/datastores/${encodeURIComponent(a)}`, { method: "DELETE" }); reload(); } catch (e) { setErr(e); } }}>
        <p>Jobs that name it can no longer sync their volumes; its sealed credentials go with it.</p>
      </Confirm>
    </div>
  );
}

// bytesText is a size in the binary units a disk is sold in: "1.5 GiB".
function bytesText(n) {
  const units = ["bytes", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return i === 0 ? `${n} bytes` : `${Math.round(n * 10) / 10} ${units[i]}`;
}

// Volumes are the team's standalone volumes (docs/data.md): named disks a
// rack keeps from one job to the next. Every member sees them; those who
// operate jobs delete them, once no job has them mounted.
function Volumes({ me }) {
  const [list, reload] = useAsync(() => call("/volumes"), [me.team]);
  const [err, setErr] = useState(null);
  const [remove, setRemove] = useState(null);
  const operate = can(me, "jobs.operate");
  return (
    <div>
      <p class="help">
        Standalone volumes of {me.team}: a job's <code>volumes[].standalone.name</code> makes one on the rack it runs on, and every
        later job that names it runs there and finds its files. One job mounts a volume at a time.
        {operate ? "" : " Members who operate jobs delete them."}
      </p>
      <ErrorNotice error={list.error || err} />
      {list.value && list.value.items.length > 0 && (
        <table class="volumes">
          <thead><tr><th scope="col">Name</th><th scope="col">Rack</th><th scope="col">Used</th><th scope="col">Size</th><th scope="col">Mounted by</th>{operate && <th scope="col">Actions</th>}</tr></thead>
          <tbody>
            {list.value.items.map((v) => (
              <tr data-volume={v.name}>
                <td><code>{v.name}</code></td>
                <td>{v.rack}</td>
                <td>{bytesText(v.bytes)}</td>
                <td>{v.size ? bytesText(v.size) : "grows with its files"}</td>
                <td>{v.job ? <Link href={`/jobs/${v.job}`}><code>{v.job.slice(0, 8)}</code></Link> : <span class="muted">no job</span>}</td>
                {operate && (
                  <td>
                    <button type="button" class="danger" disabled={!!v.job} title={v.job ? "A job has it mounted: delete it once that job has stopped" : undefined}
                      onClick={() => setRemove(v.name)}>Delete</button>
                  </td>
                )}
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {list.value && list.value.items.length === 0 && <p class="empty">No volumes.</p>}
      <Confirm open={remove !== null} title={`Delete volume ${remove}?`} confirmLabel="Delete" danger onCancel={() => setRemove(null)}
        onConfirm={async () => { const n = remove; setRemove(null); try { await call(`/volumes/${encodeURIComponent(n)}`, { method: "DELETE" }); setErr(null); reload(); } catch (e) { setErr(e); reload(); } }}>
        <p>Its files are removed from the rack that keeps it, and cannot be brought back. A job that names it later starts with an empty one.</p>
      </Confirm>
    </div>
  );
}
