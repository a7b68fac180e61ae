// @ts-check
// The new-job form's pure part: the spec it builds from its fields and
// back (Duplicate), which control shows an API field's error, and what a
// location's racks run. No DOM, no Preact: web/tests/spec.test.mjs runs it
// under node --test.

/**
 * @typedef {import("../types/api").components["schemas"]} Schemas
 * @typedef {Schemas["Spec"]} Spec
 * @typedef {Schemas["Fleet"]} Fleet
 * @typedef {Schemas["Catalogue"]} Catalogue
 * @typedef {{
 *   type: Spec["type"], name: string, labels: string, location: string, gpuModel: string,
 *   gpu: number | string, cpu: number | string, memory: number | string, image: string,
 *   diskGB: number | string, sshKeys: string, httpPort: number | string, runtime: string,
 *   model: string, servedModelName: string, args: string, replicas: number | string, requireAuth: boolean,
 *   routing: string, adapters: string, autoscale: boolean, minReplicas: number | string,
 *   maxReplicas: number | string, targetInFlight: number | string, scaleDownDelay: number | string,
 * }} Form the new-job form's fields, as typed (numbers may be text the API refuses)
 */

/** @type {Form} */
export const blank = {
  type: "gpu-container",
  name: "",
  labels: "",
  location: "",
  gpuModel: "",
  gpu: 1,
  cpu: "",
  memory: "",
  image: "ubuntu-24.04",
  diskGB: "",
  sshKeys: "",
  httpPort: "",
  runtime: "vllm",
  model: "",
  servedModelName: "",
  args: "",
  replicas: 1,
  requireAuth: true,
  routing: "",
  adapters: "",
  autoscale: false,
  minReplicas: 0,
  maxReplicas: 2,
  targetInFlight: "",
  scaleDownDelay: "",
};

/** @param {string} text */
function pairs(text) {
  /** @type {Record<string, string>} */
  const out = {};
  for (const line of text.split(/[\n,]/)) {
    const t = line.trim();
    if (!t) continue;
    const i = t.indexOf("=");
    if (i < 0) out[t] = "";
    else out[t.slice(0, i).trim()] = t.slice(i + 1).trim();
  }
  return out;
}

/** @param {Record<string, string> | undefined} m */
function unpairs(m) {
  return Object.entries(m || {}).map(([k, v]) => `${k}=${v}`).join("\n");
}

// num is a field's number; what is not one is sent as typed, for the API
// to refuse with the field's error.
/**
 * @param {string | number | null | undefined} v
 * @returns {any}
 */
function num(v) {
  if (v === "" || v === null || v === undefined) return undefined;
  const n = Number(v);
  return Number.isFinite(n) ? n : v;
}

// toSpec builds the spec from the form, over base (a duplicated job's
// spec keeps the fields the form has no control for: command, envVars,
// volumes …).
/**
 * @param {Form} f
 * @param {Partial<Spec>} [base]
 * @returns {Spec}
 */
export function toSpec(f, base = {}) {
  /** @type {Record<string, any>} */
  const spec = { ...base, type: f.type, location: f.location };
  /** @type {(k: string, v: any) => void} */
  const set = (k, v) => {
    if (v === undefined || v === "" || (typeof v === "object" && !Array.isArray(v) && Object.keys(v).length === 0)) delete spec[k];
    else spec[k] = v;
  };
  set("name", f.name.trim());
  set("labels", pairs(f.labels));
  /** @type {Record<string, any>} */
  const res = { ...(base.resources || {}), gpu: num(f.gpu) ?? 0 };
  if (f.gpuModel) res.gpuModel = f.gpuModel;
  else delete res.gpuModel;
  for (const k of /** @type {const} */ (["cpu", "memory"])) {
    if (num(f[k]) === undefined) delete res[k];
    else res[k] = num(f[k]);
  }
  spec.resources = res;
  set("diskGB", num(f.diskGB));
  if (f.type === "gpu-container") {
    set("image", f.image.trim());
    set("sshPublicKeys", f.sshKeys.split("\n").map((s) => s.trim()).filter(Boolean));
    set("defaultHttpPort", num(f.httpPort));
    delete spec.inference;
  } else {
    delete spec.image;
    delete spec.sshPublicKeys;
    /** @type {Record<string, any>} */
    const inf = { ...(base.inference || {}), runtime: f.runtime, model: f.model.trim(), replicas: num(f.replicas), requireAuth: f.requireAuth };
    if (f.servedModelName.trim()) inf.servedModelName = f.servedModelName.trim();
    else delete inf.servedModelName;
    if (f.routing) inf.routing = f.routing;
    else delete inf.routing;
    const adapters = Object.entries(pairs(f.adapters)).map(([name, source]) => ({ name, source }));
    if (adapters.length) inf.adapters = adapters;
    else delete inf.adapters;
    if (f.autoscale) {
      /** @type {Record<string, any>} */
      const a = { minReplicas: num(f.minReplicas) ?? 0, maxReplicas: num(f.maxReplicas) };
      if (num(f.targetInFlight) !== undefined) a.targetInFlight = num(f.targetInFlight);
      if (num(f.scaleDownDelay) !== undefined) a.scaleDownDelay = num(f.scaleDownDelay);
      inf.autoscaling = a;
      // The scaler sets the count: left to it (it starts at the minimum,
      // at least one) unless the form says where to start.
      if (f.replicas === "" || f.replicas === null) delete inf.replicas;
    } else delete inf.autoscaling;
    const args = pairs(f.args);
    if (Object.keys(args).length) inf.args = args;
    else delete inf.args;
    delete inf.gpusPerReplica; // resources.gpu says it
    spec.inference = inf;
  }
  return /** @type {Spec} */ (spec);
}

// fromSpec fills the form from a spec (Duplicate).
/**
 * @param {Spec} spec
 * @returns {Form}
 */
export function fromSpec(spec) {
  const r = spec.resources || {};
  const inf = spec.inference || {};
  return {
    ...blank,
    type: spec.type,
    name: spec.name ? `${spec.name}-copy` : "",
    labels: unpairs(spec.labels),
    location: spec.location || "",
    gpuModel: r.gpuModel || "",
    gpu: r.gpu ?? 1,
    cpu: r.cpu ?? "",
    memory: r.memory ?? "",
    image: spec.image || "",
    diskGB: spec.diskGB ?? "",
    sshKeys: (spec.sshPublicKeys || []).join("\n"),
    httpPort: spec.defaultHttpPort ?? "",
    runtime: inf.runtime || "vllm",
    model: inf.model || "",
    servedModelName: inf.servedModelName || "",
    args: unpairs(inf.args),
    replicas: inf.replicas ?? 1,
    requireAuth: inf.requireAuth === undefined ? true : !!inf.requireAuth,
    routing: inf.routing || "",
    adapters: (inf.adapters || []).map((a) => `${a.name}=${a.source}`).join("\n"),
    autoscale: !!inf.autoscaling,
    minReplicas: inf.autoscaling ? inf.autoscaling.minReplicas ?? 0 : blank.minReplicas,
    maxReplicas: inf.autoscaling ? inf.autoscaling.maxReplicas ?? "" : blank.maxReplicas,
    targetInFlight: inf.autoscaling?.targetInFlight ?? "",
    scaleDownDelay: inf.autoscaling?.scaleDownDelay ?? "",
  };
}

// The API's field paths and the control that shows each.
/** @type {Record<string, string>} */
const FIELD_OF = {
  type: "type",
  name: "name",
  labels: "labels",
  location: "location",
  "resources.gpuModel": "gpuModel",
  gpuModel: "gpuModel",
  "resources.gpu": "gpu",
  "inference.gpusPerReplica": "gpu",
  "resources.cpu": "cpu",
  "resources.memory": "memory",
  image: "image",
  diskGB: "diskGB",
  sshPublicKeys: "sshKeys",
  defaultHttpPort: "httpPort",
  "inference.runtime": "runtime",
  "inference.model": "model",
  "inference.servedModelName": "servedModelName",
  "inference.args": "args",
  "inference.replicas": "replicas",
  "inference.requireAuth": "requireAuth",
  "inference.routing": "routing",
  "inference.adapters": "adapters",
  "inference.autoscaling": "autoscale",
  "inference.autoscaling.minReplicas": "minReplicas",
  "inference.autoscaling.maxReplicas": "maxReplicas",
  "inference.autoscaling.targetInFlight": "targetInFlight",
  "inference.autoscaling.scaleDownDelay": "scaleDownDelay",
};

/** @param {string} field */
export function controlOf(field) {
  let best = "";
  for (const k of Object.keys(FIELD_OF)) {
    if ((field === k || field.startsWith(k + ".") || field.startsWith(k + "[")) && k.length > best.length) best = k;
  }
  return best ? FIELD_OF[best] : "";
}

// catalogueOf is what the racks of a location (of a GPU model, if one is
// chosen) run together, from the fleet's catalogues: null where one has not
// reported its catalogue (the form then offers free text). images is null
// where a rack takes any image.
/**
 * @param {Fleet | null | undefined} fleet
 * @param {string} location
 * @param {string} [gpuModel]
 */
export function catalogueOf(fleet, location, gpuModel) {
  const loc = ((fleet && fleet.locations) || []).find((l) => l.name === location);
  const models = ((loc && loc.gpuModels) || []).filter((m) => !gpuModel || m.model === gpuModel);
  const some = models.map((m) => m.catalogue);
  if (!some.length || !some.every(Boolean)) return null;
  const cats = /** @type {Catalogue[]} */ (some);
  /** @param {"images" | "jobTypes" | "runtimes"} k */
  const all = (k) => [.../** @type {Set<string>} */ (new Set(cats.flatMap((c) => c[k] || [])))].sort();
  /** @param {"maxVmCpus" | "maxVmMemoryMiB"} k */
  const capped = (k) => (cats.every((c) => c[k]) ? Math.max(...cats.map((c) => c[k] || 0)) : 0);
  return {
    images: cats.every((c) => c.images && c.images.length) ? all("images") : null,
    jobTypes: all("jobTypes"),
    runtimes: all("runtimes"),
    maxVmCpus: capped("maxVmCpus"),
    maxVmMemoryMiB: capped("maxVmMemoryMiB"),
  };
}

// withCatalogueImage keeps the form's image one the location's racks boot:
// the first of their catalogue when the form's is not in it.
/**
 * @param {Form} form
 * @param {Fleet | null | undefined} fleet
 * @returns {Form}
 */
export function withCatalogueImage(form, fleet) {
  const cat = catalogueOf(fleet, form.location, form.gpuModel);
  if (cat && cat.images && !cat.images.includes(form.image)) return { ...form, image: cat.images[0] };
  return form;
}
