import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { call } from "./api.js";
import { navigate, useQuery } from "./router.jsx";
import { Copy, ErrorNotice, Notice } from "./ui.jsx";
import { blank, catalogueOf, controlOf, fromSpec, toSpec, withCatalogueImage } from "./spec.js";

// The new-job form. Its fields are the sections of the job configuration;
// the spec it builds is validated by the API itself (POST /jobs/command,
// which validates as create does and answers the equivalent CLI line), so
// the messages next to the fields are the API's.

// FIXED are the form's fields an update cannot change (cosmic.UpdateFields):
// where the job runs, its size and its endpoint's name.
const FIXED = ["name", "location", "gpuModel", "gpu", "cpu", "memory", "diskGB", "runtime", "servedModelName"];

export function NewJobPage({ me }) {
  const q = useQuery();
  // ?from=ID duplicates a job; ?update=ID changes a managed-inference
  // job's spec (PUT /jobs/{id}/spec: a rolling update), its fields fixed
  // at create shown but not editable.
  const updating = q.get("update");
  const from = q.get("from") || updating;
  const [form, setForm] = useState(null);
  const [base, setBase] = useState({});
  const [fleet, setFleet] = useState(null);
  const [errors, setErrors] = useState({});
  const [others, setOthers] = useState([]);
  const [command, setCommand] = useState(null);
  const [showCmd, setShowCmd] = useState(false);
  const [submitError, setSubmitError] = useState(null);
  const [busy, setBusy] = useState(false);
  const [touched, setTouched] = useState(false);
  const seq = useRef(0);

  useEffect(() => {
    (async () => {
      let fl = { locations: [] };
      try {
        fl = await call("/fleet");
      } catch {
        // the form still works without the fleet's free counts
      }
      setFleet(fl);
      if (from) {
        try {
          const job = await call(`/jobs/${encodeURIComponent(from)}`);
          const { name: _n, ...rest } = job.spec;
          if (updating) {
            setBase(job.spec);
            setForm({ ...fromSpec(job.spec), name: job.spec.name || "" });
            return;
          }
          setBase(rest);
          setForm(fromSpec(job.spec));
          return;
        } catch (e) {
          setSubmitError(e);
        }
      }
      const loc = (fl.locations || [])[0];
      setForm(withCatalogueImage({ ...blank, location: loc ? loc.name : "" }, fl));
    })();
  }, [from]);

  const spec = useMemo(() => (form ? toSpec(form, base) : null), [form, base]);

  // Validate with the API as the user types (debounced); the newest
  // answer wins.
  useEffect(() => {
    if (!spec) return;
    const n = ++seq.current;
    const t = setTimeout(async () => {
      try {
        const cmd = await call("/jobs/command", { body: spec });
        if (n !== seq.current) return;
        setCommand(cmd);
        setErrors({});
        setOthers([]);
      } catch (e) {
        if (n !== seq.current) return;
        setCommand(null);
        const errs = {};
        const rest = [];
        for (const d of e.details && e.details.length ? e.details : [{ field: "", message: e.message }]) {
          const c = controlOf(d.field || "");
          const msg = d.reason && d.reason.message ? d.reason.message : d.message;
          if (c) errs[c] = errs[c] ? `${errs[c]}; ${msg}` : msg;
          else rest.push(d.field ? `${d.field}: ${msg}` : msg);
        }
        setErrors(errs);
        setOthers(rest);
      }
    }, 250);
    return () => clearTimeout(t);
  }, [JSON.stringify(spec)]);

  if (!form) return <p aria-busy="true">Loading…</p>;

  const set = (k) => (e) => {
    const el = e.currentTarget;
    setTouched(true);
    const next = { ...form, [k]: el.type === "checkbox" ? el.checked : el.value };
    setForm(k === "location" || k === "gpuModel" ? withCatalogueImage(next, fleet) : next);
  };
  const loc = ((fleet && fleet.locations) || []).find((l) => l.name === form.location);
  const models = (loc && loc.gpuModels) || [];
  const isInf = form.type === "managed-inference";
  const cat = catalogueOf(fleet, form.location, form.gpuModel);
  const serves = (t) => !cat || cat.jobTypes.includes(t);
  const where = `${form.location}${form.gpuModel ? ` (${form.gpuModel})` : ""}`;
  const capHelp = (k) => {
    if (!cat) return "";
    if (k === "cpu" && cat.maxVmCpus) return ` A VM in ${where} gets at most ${cat.maxVmCpus} vCPU, whatever is asked.`;
    if (k === "memory" && cat.maxVmMemoryMiB) return ` A VM in ${where} gets at most ${Math.round((cat.maxVmMemoryMiB / 1024) * 10) / 10} GiB, whatever is asked.`;
    return "";
  };

  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setSubmitError(null);
    try {
      const job = updating ? await call(`/jobs/${encodeURIComponent(updating)}/spec`, { method: "PUT", body: spec }) : await call("/jobs", { body: spec });
      navigate(`/jobs/${job.id}`);
    } catch (err) {
      setSubmitError(err);
      if (err.details && err.details.length) {
        const errs = {};
        for (const d of err.details) {
          const c = controlOf(d.field || "");
          if (c) errs[c] = d.message;
        }
        setErrors(errs);
      }
    } finally {
      setBusy(false);
    }
  };

  const field = (k, label, input, help) => (
    <div class={`field${errors[k] ? " invalid" : ""}`}>
      <label for={`f-${k}`}>{label}</label>
      {input}
      {help && <p class="help" id={`h-${k}`}>{help}</p>}
      {errors[k] && (touched || from) && <p class="error" id={`e-${k}`} role="alert">{errors[k]}</p>}
    </div>
  );
  const attrs = (k) => ({
    id: `f-${k}`,
    name: k,
    value: form[k],
    disabled: updating && FIXED.includes(k) ? true : undefined,
    onInput: set(k),
    "aria-invalid": errors[k] && (touched || from) ? "true" : undefined,
    "aria-describedby": [errors[k] ? `e-${k}` : "", `h-${k}`].filter(Boolean).join(" ") || undefined,
  });

  return (
    <section aria-labelledby="new-title">
      <h1 id="new-title">{updating ? "Update job" : from ? "Duplicate job" : "New job"}</h1>
      {updating ? (
        <Notice>
          The model, runtime arguments, LoRA adapters and image roll out to the replicas one at a time while the job serves, and roll back if a
          new replica fails; routing, authorization, autoscaling and the replica count change at once. What is fixed at create is shown greyed.
        </Notice>
      ) : (
        from && <Notice>Filled in from job {from.slice(0, 8)}. Change what differs, then create.</Notice>
      )}
      <form class="jobform" onSubmit={submit} noValidate>
        <fieldset class="type">
          <legend>Job type</legend>
          <label class="choice">
            <input type="radio" name="type" value="gpu-container" checked={!isInf} onChange={set("type")} disabled={!!updating || !serves("gpu-container") && !isInf} />
            <span><strong>GPU Container Job</strong> A VM with GPUs and a shell.</span>
          </label>
          <label class="choice">
            <input type="radio" name="type" value="managed-inference" checked={isInf} onChange={set("type")} disabled={!!updating || !serves("managed-inference") && !isInf} />
            <span>
              <strong>Managed Inference Job</strong> A model behind an OpenAI-compatible API.
              {!serves("managed-inference") && <em class="help" id="h-type-inference"> The racks of {where} do not run it.</em>}
            </span>
          </label>
          {isInf && !serves("managed-inference") && <p class="error" role="alert">The racks of {where} run {cat.jobTypes.join(", ")} jobs only: choose another location.</p>}
        </fieldset>

        <fieldset>
          <legend>Basics</legend>
          {field("name", "Name", <input {...attrs("name")} autoComplete="off" />, "Unique in the team; optional.")}
          {field("labels", "Labels", <textarea {...attrs("labels")} rows={2} placeholder="key=value, one a line" />, "key=value, one a line or comma-separated.")}
          {field(
            "location",
            "Location",
            fleet && fleet.locations && fleet.locations.length ? (
              <select {...attrs("location")} onChange={set("location")}>
                {!loc && <option value={form.location}>{form.location || "choose a location"}</option>}
                {fleet.locations.map((l) => <option value={l.name}>{l.name}</option>)}
              </select>
            ) : (
              <input {...attrs("location")} autoComplete="off" />
            ),
          )}
        </fieldset>

        <fieldset>
          <legend>Hardware</legend>
          {field(
            "gpuModel",
            "GPU model",
            <select {...attrs("gpuModel")} onChange={set("gpuModel")}>
              <option value="">Any model in {form.location || "the location"}</option>
              {models.map((m) => (
                <option value={m.model}>{m.model} — {m.free} of {m.gpus} free, up to {m.maxPerNode} a node</option>
              ))}
              {form.gpuModel && !models.some((m) => m.model === form.gpuModel) && <option value={form.gpuModel}>{form.gpuModel}</option>}
            </select>,
          )}
          {field("gpu", isInf ? "GPUs per replica" : "GPU count", <input {...attrs("gpu")} type="number" min="0" inputMode="numeric" />)}
          {field("cpu", "CPU cores", <input {...attrs("cpu")} type="number" min="0" inputMode="numeric" placeholder="8 a GPU" />, `Empty: 8 cores a GPU.${capHelp("cpu")}`)}
          {field("memory", "Memory (GiB)", <input {...attrs("memory")} type="number" min="0" inputMode="numeric" placeholder="64 a GPU" />, `Empty: 64 GiB a GPU.${capHelp("memory")}`)}
        </fieldset>

        {!isInf ? (
          <fieldset>
            <legend>Image &amp; access</legend>
            {cat && cat.images
              ? field(
                  "image",
                  "Image",
                  <select {...attrs("image")} onChange={set("image")}>
                    {cat.images.map((im) => <option value={im}>{im}</option>)}
                    {!cat.images.includes(form.image) && <option value={form.image}>{form.image} (not booted in {where})</option>}
                  </select>,
                  `The images the racks of ${where} boot.`,
                )
              : field("image", "Image", <input {...attrs("image")} autoComplete="off" />, "A cloud image name, e.g. ubuntu-24.04.")}
            {field("diskGB", "Disk (GB)", <input {...attrs("diskGB")} type="number" min="1" placeholder="100" />)}
            {field("sshKeys", "SSH public keys", <textarea {...attrs("sshKeys")} rows={3} placeholder="ssh-ed25519 AAAA… one a line" />)}
            {field("httpPort", "HTTP port", <input {...attrs("httpPort")} type="number" min="1" max="65535" />, "Served at the job's page through the API; optional.")}
          </fieldset>
        ) : (
          <>
            <fieldset>
              <legend>Model</legend>
              {field(
                "runtime",
                "Runtime",
                <select {...attrs("runtime")} onChange={set("runtime")}>
                  <option value="vllm" disabled={cat && !cat.runtimes.includes("vllm")}>vLLM (chat, completions, embeddings)</option>
                  <option value="parakeet" disabled={cat && !cat.runtimes.includes("parakeet")}>Parakeet (speech to text)</option>
                  <option value="llama.cpp" disabled={cat && !cat.runtimes.includes("llama.cpp")}>llama.cpp (GGUF models of the rack's model directory)</option>
                </select>,
              )}
              {field("model", "Model", <input {...attrs("model")} autoComplete="off" placeholder="meta-llama/Llama-3.1-8B-Instruct" />)}
              {field("servedModelName", "Served model name", <input {...attrs("servedModelName")} autoComplete="off" />, "The name clients ask for; default the model.")}
            </fieldset>
            <fieldset>
              <legend>Serving configuration</legend>
              {field("args", "Runtime arguments", <textarea {...attrs("args")} rows={3} placeholder="max-model-len=8192" />, "name=value, one a line.")}
              {field("replicas", form.autoscale ? "Replicas at start" : "Replicas", <input {...attrs("replicas")} type="number" min="1" placeholder={form.autoscale ? "the minimum, at least 1" : ""} />)}
              <div class="field">
                <label class="check">
                  <input type="checkbox" id="f-autoscale" checked={form.autoscale} onChange={set("autoscale")} /> Autoscale
                </label>
                <p class="help">Replicas follow the requests: added at once under load, removed after the scale-down delay. A minimum of 0 holds no GPU while idle; the next request waits while a replica starts.</p>
              </div>
              {form.autoscale && (
                <>
                  {field("minReplicas", "Minimum replicas", <input {...attrs("minReplicas")} type="number" min="0" />)}
                  {field("maxReplicas", "Maximum replicas", <input {...attrs("maxReplicas")} type="number" min="1" />)}
                  {field("targetInFlight", "Requests per replica", <input {...attrs("targetInFlight")} type="number" min="1" placeholder="4" />, "In flight or waiting: the scaler runs requests ÷ this, within the bounds.")}
                  {field("scaleDownDelay", "Scale-down delay (s)", <input {...attrs("scaleDownDelay")} type="number" min="10" placeholder="300" />, "How long the load must want fewer replicas before any go.")}
                </>
              )}
              {field("adapters", "LoRA adapters", <textarea {...attrs("adapters")} rows={2} placeholder="sql=acme/llama-sql-lora" />, "name=source, one a line; called as MODEL:name.")}
              {field(
                "routing",
                "Routing",
                <select {...attrs("routing")} onChange={set("routing")}>
                  <option value="">Default (prefix)</option>
                  <option value="prefix">Prefix: the replica that holds the prompt's start in cache</option>
                  <option value="least-outstanding">Least outstanding: the replica with the fewest requests in flight</option>
                </select>,
                "How each request picks a replica.",
              )}
              {field("diskGB", "Disk (GB)", <input {...attrs("diskGB")} type="number" min="1" placeholder="200" />)}
            </fieldset>
            <fieldset>
              <legend>Endpoint</legend>
              <div class="field">
                <label class="check">
                  <input type="checkbox" id="f-requireAuth" checked={form.requireAuth} onChange={set("requireAuth")} /> Require authorization
                </label>
                <p class="help">On: only the team's API keys reach the model. Off: anyone who reaches the platform does, by its full name @TEAM/NAME.</p>
              </div>
            </fieldset>
          </>
        )}

        {others.length > 0 && touched && (
          <Notice kind="error">
            <ul>{others.map((o) => <li>{o}</li>)}</ul>
          </Notice>
        )}
        <ErrorNotice error={submitError} />
        <div class="actions">
          <button type="submit" class="primary" disabled={busy}>{updating ? (busy ? "Updating…" : "Update job") : busy ? "Creating…" : "Create job"}</button>
          <button type="button" onClick={() => setShowCmd(!showCmd)} aria-expanded={showCmd} aria-controls="cli-command">
            {showCmd ? "Hide CLI command" : "Show CLI command"}
          </button>
        </div>
        {showCmd && (
          <div id="cli-command" class="cli">
            {command ? (
              <>
                <Copy text={command.command} label="The equivalent cosmicac command" />
                {command.unexpressed && command.unexpressed.length > 0 && (
                  <p class="help">No flag sets {command.unexpressed.join(", ")}: save the spec to a file and run <code>cosmicac jobs create -f FILE</code>.</p>
                )}
              </>
            ) : (
              <p class="help">Fix the fields above to see the command.</p>
            )}
          </div>
        )}
      </form>
    </section>
  );
}
