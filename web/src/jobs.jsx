import { useEffect, useMemo, useState } from "preact/hooks";
import { watchJobs } from "./api.js";
import { Link, navigate, useQuery } from "./router.jsx";
import { ErrorNotice, StateBadge, STATE_LABEL, STATES, Time } from "./ui.jsx";
import { can } from "./main.jsx";

// PAGE is the page size asked of the API; the name search filters the
// page loaded (docs/webui.md).
const PAGE = 500;

// StatusDetail is what a state means for one job: the reason and fix of a
// failure, the place in the queue and what it waits for, progress.
export function StatusDetail({ status }) {
  if (!status) return null;
  if (status.state === "queued") {
    return (
      <span class="detail">
        {status.queuePosition ? <>#{status.queuePosition} in queue</> : "in queue"}
        {status.waitingFor && <> · waiting for {status.waitingFor}</>}
        {status.reason && <> · {status.reason.message}</>}
      </span>
    );
  }
  if (status.reason) {
    return (
      <span class="detail">
        <span class="reason" data-code={status.reason.code}>{status.reason.message}</span>
        {status.reason.fix && <span class="fix"> Fix: {status.reason.fix}</span>}
      </span>
    );
  }
  if (status.progress) return <span class="detail">{status.progress.step} {status.progress.percent}%</span>;
  if (status.message) return <span class="detail">{status.message}</span>;
  return null;
}

export function gpuText(spec) {
  const r = spec.resources || {};
  const n = spec.type === "managed-inference" ? `${r.gpu || 0} × ${(spec.inference && spec.inference.replicas) || 1}` : `${r.gpu || 0}`;
  return r.gpuModel ? `${n} ${r.gpuModel}` : n;
}

export function JobsPage({ me }) {
  const q = useQuery();
  const [states, setStates] = useState(q.getAll("state"));
  const [label, setLabel] = useState(q.get("label") || "");
  const [user, setUser] = useState(q.get("user") || "");
  const [search, setSearch] = useState(q.get("q") || "");
  const [page, setPage] = useState(Number(q.get("page") || 1));
  const [list, setList] = useState(null);
  const [error, setError] = useState(null);

  // The filters are in the address, so a filtered list can be shared.
  useEffect(() => {
    const p = new URLSearchParams();
    for (const s of states) p.append("state", s);
    if (label) p.set("label", label);
    if (user) p.set("user", user);
    if (search) p.set("q", search);
    if (page > 1) p.set("page", page);
    const s = p.toString();
    if (s !== location.search.slice(1)) history.replaceState(null, "", "/jobs" + (s ? "?" + s : ""));
  }, [states, label, user, search, page]);

  useEffect(() => {
    const query = new URLSearchParams({ size: PAGE, page });
    if (states.length) query.set("statusState", states.join(","));
    if (label) query.set("labelSelector", label);
    if (user) query.set("userName", user);
    setError(null);
    return watchJobs(
      query,
      (l) => {
        setList(l);
        setError(null);
      },
      setError,
    );
  }, [states.join(","), label, user, page, me.team]);

  const shown = useMemo(() => {
    if (!list) return [];
    const s = search.trim().toLowerCase();
    return s ? list.items.filter((j) => (j.spec.name || "").toLowerCase().includes(s) || j.id.startsWith(s)) : list.items;
  }, [list, search]);

  const toggleState = (s) => {
    setPage(1);
    setStates(states.includes(s) ? states.filter((x) => x !== s) : [...states, s]);
  };

  return (
    <section aria-labelledby="jobs-title">
      <div class="heading">
        <h1 id="jobs-title">Jobs <span class="muted">in {me.team}</span></h1>
        {can(me, "jobs.create") && <Link href="/jobs/new" class="button primary">New job</Link>}
      </div>
      <form class="filters" role="search" onSubmit={(e) => e.preventDefault()}>
        <div>
          <label for="search">Search by name</label>
          <input id="search" type="search" value={search} onInput={(e) => setSearch(e.currentTarget.value)} placeholder="name or ID" />
        </div>
        <div>
          <label for="label">Labels</label>
          <input id="label" value={label} onChange={(e) => { setPage(1); setLabel(e.currentTarget.value.trim()); }} placeholder="key=value,…" />
        </div>
        <div>
          <label for="user">User</label>
          <input id="user" value={user} onChange={(e) => { setPage(1); setUser(e.currentTarget.value.trim()); }} placeholder="user name" />
        </div>
        <fieldset class="states">
          <legend>Status</legend>
          {STATES.map((s) => (
            <label class="chip">
              <input type="checkbox" checked={states.includes(s)} onChange={() => toggleState(s)} /> {STATE_LABEL[s]}
            </label>
          ))}
        </fieldset>
      </form>
      <ErrorNotice error={error} />
      {!list ? (
        <p aria-busy="true">Loading jobs…</p>
      ) : shown.length === 0 ? (
        <p class="empty">
          {list.total === 0 && !states.length && !label && !user ? (
            <>No jobs yet. {can(me, "jobs.create") && <Link href="/jobs/new">Create one</Link>}</>
          ) : (
            "No jobs match these filters."
          )}
        </p>
      ) : (
        <div class="table-wrap">
          <table class="jobs" aria-describedby="jobs-count">
            <caption id="jobs-count" class="muted">
              {search ? `${shown.length} of ${list.items.length} shown` : `${list.total} job${list.total === 1 ? "" : "s"}`}
            </caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Status</th>
                <th scope="col">Type</th>
                <th scope="col">GPUs</th>
                <th scope="col">Location</th>
                <th scope="col">User</th>
                <th scope="col">Created</th>
              </tr>
            </thead>
            <tbody>
              {shown.map((j) => (
                <tr key={j.id} data-job={j.id} onClick={(e) => { if (e.target.tagName !== "A") navigate(`/jobs/${j.id}`); }}>
                  <td><Link href={`/jobs/${j.id}`}>{j.spec.name || j.id.slice(0, 8)}</Link></td>
                  <td class="status"><StateBadge state={j.status.state} /> <StatusDetail status={j.status} /></td>
                  <td>{j.spec.type === "managed-inference" ? "Inference" : "GPU container"}</td>
                  <td>{gpuText(j.spec)}</td>
                  <td>{j.spec.location}</td>
                  <td>{j.user}</td>
                  <td><Time t={j.createdAt} /></td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {list && list.total > PAGE && (
        <nav class="pager" aria-label="Pages">
          <button type="button" disabled={page <= 1} onClick={() => setPage(page - 1)}>Previous</button>
          <span>Page {page} of {Math.ceil(list.total / PAGE)}</span>
          <button type="button" disabled={page * PAGE >= list.total} onClick={() => setPage(page + 1)}>Next</button>
        </nav>
      )}
    </section>
  );
}
