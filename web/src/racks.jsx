import { useState } from "preact/hooks";
import { call } from "./api.js";
import { Confirm, ErrorNotice, Notice, Time, useAsync } from "./ui.jsx";
import { can } from "./main.jsx";

// fmt1 writes a number with at most one decimal: 13.5, 224.
const fmt1 = (x) => String(Math.round(x * 10) / 10);

// GPUs draws a node's GPUs as squares: filled for used, hollow for free.
function GPUs({ node }) {
  const cells = [];
  for (let i = 0; i < node.gpus; i++) cells.push(i < node.usedGpus);
  return (
    <div class="gpus" role="img" aria-label={`${node.usedGpus} of ${node.gpus} GPUs used`}>
      {cells.map((used) => <span class={used ? "gpu used" : "gpu"} />)}
    </div>
  );
}

// catalogueText says what racks run, in one line, as `cosmicac locations`
// does.
export function catalogueText(c) {
  if (!c) return "not reported yet";
  const parts = [`${(c.jobTypes || []).join(", ")} jobs`];
  if (c.runtimes && c.runtimes.length) parts.push(`runtimes ${c.runtimes.join(", ")}`);
  parts.push(c.images && c.images.length ? `images ${c.images.join(", ")}` : "any image");
  const caps = [];
  if (c.maxVmCpus) caps.push(`${c.maxVmCpus} vCPU`);
  if (c.maxVmMemoryMiB) caps.push(`${fmt1(c.maxVmMemoryMiB / 1024)} GiB`);
  if (caps.length) parts.push(`a VM gets at most ${caps.join(" and ")}`);
  return parts.join("; ");
}

// RacksPage is the racks for a platform admin (racks.manage), and for
// everyone else the read-only view of the locations they may use
// (GET /fleet, jobs.read): no rack, node or worker, and no form.
export function RacksPage({ me }) {
  return can(me, "racks.manage") ? <AdminRacks /> : <Locations />;
}

function Locations() {
  const [fleet] = useAsync(() => call("/fleet"), []);
  return (
    <section aria-labelledby="locations-title">
      <h1 id="locations-title">Locations</h1>
      <p class="muted">Where your jobs may run, and what runs there. A platform admin registers racks.</p>
      <ErrorNotice error={fleet.error} />
      {fleet.value && fleet.value.locations.length === 0 && <p class="empty">No locations yet: no rack is registered.</p>}
      {fleet.value && fleet.value.locations.length > 0 && (
        <table class="locations">
          <thead>
            <tr><th scope="col">Location</th><th scope="col">GPU model</th><th scope="col">GPUs free</th><th scope="col">Most a node holds</th><th scope="col">Runs</th></tr>
          </thead>
          <tbody>
            {fleet.value.locations.flatMap((l) =>
              l.gpuModels.map((m) => (
                <tr data-location={l.name} data-model={m.model}>
                  <td>{l.name}</td>
                  <td>{m.model}</td>
                  <td>{m.free} of {m.gpus}</td>
                  <td>{m.maxPerNode} GPUs{m.maxCpuPerNode ? `, ${m.maxCpuPerNode} vCPU` : ""}{m.maxMemoryMiBPerNode ? `, ${fmt1(m.maxMemoryMiBPerNode / 1024)} GiB` : ""}</td>
                  <td class="catalogue">{catalogueText(m.catalogue)}</td>
                </tr>
              )),
            )}
          </tbody>
        </table>
      )}
    </section>
  );
}

function AdminRacks() {
  const [racks, reload] = useAsync(() => call("/racks"), []);
  const [err, setErr] = useState(null);
  const [remove, setRemove] = useState(null);
  const [force, setForce] = useState(false);

  const register = async (e) => {
    e.preventDefault();
    const f = new FormData(e.currentTarget);
    const form = e.currentTarget;
    try {
      await call("/racks", {
        body: {
          id: f.get("id"),
          location: f.get("location"),
          gpuModel: f.get("gpuModel"),
          workerKey: f.get("workerKey"),
          workerAddrs: String(f.get("workerAddrs") || "").split(/[\s,]+/).filter(Boolean),
        },
      });
      form.reset();
      setErr(null);
      reload();
    } catch (e2) {
      setErr(e2);
    }
  };

  return (
    <section aria-labelledby="racks-title">
      <h1 id="racks-title">Racks</h1>
      <ErrorNotice error={racks.error || err} />
      {racks.value && racks.value.items.length === 0 && <p class="empty">No racks registered.</p>}
      {racks.value &&
        racks.value.items.map((r) => (
          <article class="rack card" aria-labelledby={`rack-${r.id}`} data-rack={r.id}>
            <div class="heading">
              <h2 id={`rack-${r.id}`}>{r.id}</h2>
              <button type="button" class="danger" onClick={() => { setForce(false); setRemove(r.id); }}>Remove</button>
            </div>
            <p>
              {r.location} · {r.gpuModel} · {r.type} · {r.freeGpus} of {r.gpus} GPUs free ·{" "}
              {r.reachable ? "worker reachable" : <strong class="bad">worker unreachable</strong>} · registered <Time t={r.createdAt} />
            </p>
            {r.note && <p class="muted">{r.note}</p>}
            <p class="catalogue">Runs: {catalogueText(r.catalogue)}</p>
            {r.problem && (
              <Notice kind="error">
                {r.problem.message}
                {r.problem.fix && <> Fix: {r.problem.fix}</>}
              </Notice>
            )}
            <table class="nodes">
              <thead><tr><th scope="col">Node</th><th scope="col">GPUs</th><th scope="col">Used / free</th><th scope="col">vCPUs free</th><th scope="col">Memory free</th><th scope="col">State</th></tr></thead>
              <tbody>
                {(r.nodes || []).map((n) => (
                  <tr>
                    <td>{n.name}</td>
                    <td><GPUs node={n} /></td>
                    <td>{n.usedGpus} / {n.freeGpus}</td>
                    <td>{n.cpuMilli ? `${fmt1((n.cpuMilli - (n.usedCpuMilli || 0)) / 1000)} of ${fmt1(n.cpuMilli / 1000)}` : "not limited"}</td>
                    <td>{n.memoryMiB ? `${fmt1((n.memoryMiB - (n.usedMemoryMiB || 0)) / 1024)} of ${fmt1(n.memoryMiB / 1024)} GiB` : "not limited"}</td>
                    <td>{n.ready ? (n.schedulable ? "ready" : "cordoned") : "not ready"}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </article>
        ))}
      <form class="card register" onSubmit={register} aria-labelledby="register-title">
        <h2 id="register-title">Register a rack</h2>
        <div class="grid">
          <div class="field"><label for="r-id">ID</label><input id="r-id" name="id" required /></div>
          <div class="field"><label for="r-location">Location</label><input id="r-location" name="location" required /></div>
          <div class="field"><label for="r-gpu">GPU model</label><input id="r-gpu" name="gpuModel" required /></div>
          <div class="field"><label for="r-key">Worker key</label><input id="r-key" name="workerKey" required /></div>
          <div class="field"><label for="r-addrs">Worker addresses</label><input id="r-addrs" name="workerAddrs" placeholder="host:port, …" /></div>
        </div>
        <button type="submit" class="primary">Register</button>
      </form>
      <Confirm
        open={remove !== null}
        title={`Remove rack ${remove}?`}
        confirmLabel="Remove"
        danger
        onCancel={() => setRemove(null)}
        onConfirm={async () => {
          const id = remove;
          setRemove(null);
          try {
            await call(`/racks/${encodeURIComponent(id)}${force ? "?force=true" : ""}`, { method: "DELETE" });
            setErr(null);
            reload();
          } catch (e) {
            setErr(e);
          }
        }}
      >
        <p>Jobs holding GPUs on it are refused unless you force it, which fails them (rack_removed).</p>
        <label class="check"><input type="checkbox" checked={force} onChange={(e) => setForce(e.currentTarget.checked)} /> Force</label>
      </Confirm>
    </section>
  );
}
