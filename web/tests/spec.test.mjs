// The new-job form's spec mapping (web/src/spec.js): the spec built from
// the form, the form filled from a spec (Duplicate), and which control
// shows an API field's error. Needs no platform.
import { test } from "node:test";
import assert from "node:assert/strict";
import { blank, catalogueOf, controlOf, fromSpec, toSpec } from "../src/spec.js";

test("toSpec: a GPU container job from the form, empty fields left out", () => {
  const spec = toSpec({ ...blank, name: " train ", location: "us", gpu: "2", labels: "team=ml, tier = gold", image: "ubuntu-24.04", diskGB: "100", sshKeys: "ssh-ed25519 A\n\n ssh-ed25519 B ", httpPort: "" });
  assert.deepEqual(spec, {
    type: "gpu-container", location: "us", name: "train", labels: { team: "ml", tier: "gold" },
    resources: { gpu: 2 }, diskGB: 100, image: "ubuntu-24.04", sshPublicKeys: ["ssh-ed25519 A", "ssh-ed25519 B"],
  });
});

test("toSpec: a managed inference job; the GPUs per replica are resources.gpu", () => {
  const spec = toSpec({ ...blank, type: "managed-inference", location: "us", gpu: 1, model: "Qwen/Qwen3-8B", servedModelName: "qwen", args: "max-model-len=4096", replicas: "2", requireAuth: false });
  assert.deepEqual(spec.inference, { runtime: "vllm", model: "Qwen/Qwen3-8B", replicas: 2, requireAuth: false, servedModelName: "qwen", args: { "max-model-len": "4096" } });
  assert.equal(spec.image, undefined);
  assert.deepEqual(spec.resources, { gpu: 1 });
});

test("fromSpec then toSpec keeps what the form shows, and the base keeps the rest (Duplicate)", () => {
  const spec = {
    type: "managed-inference", name: "m", location: "eu", labels: { a: "b" }, resources: { gpu: 2, gpuModel: "GH100_H100_SXM5_80GB", cpu: 8, memory: 64 },
    diskGB: 50, command: ["sleep", "1"], inference: { runtime: "vllm", model: "x/y", replicas: 3, requireAuth: true, servedModelName: "y", args: { "tp": "2" }, gpusPerReplica: 2, routing: "least-outstanding",
      adapters: [{ name: "sql", source: "acme/sql-lora" }, { name: "legal", source: "acme/legal-lora" }] },
  };
  const form = fromSpec(spec);
  assert.equal(form.name, "m-copy");
  const again = toSpec({ ...form, name: "m" }, spec);
  const { gpusPerReplica, ...inf } = spec.inference;
  assert.deepEqual(again, { ...spec, inference: inf });
  for (const gc of [{ type: "gpu-container", location: "us", image: "ubuntu-24.04", resources: { gpu: 1 }, sshPublicKeys: ["k"], defaultHttpPort: 8080 }]) {
    assert.deepEqual(toSpec(fromSpec(gc), gc), { ...gc }, "a container's round trip");
  }
});

test("toSpec and fromSpec: autoscaling, its fields as the API names them", () => {
  const form = { ...blank, type: "managed-inference", location: "us", model: "cosmicac/test-chat", runtime: "llama.cpp", replicas: "",
    autoscale: true, minReplicas: "0", maxReplicas: "3", targetInFlight: "2", scaleDownDelay: "" };
  const spec = toSpec(form);
  assert.deepEqual(spec.inference.autoscaling, { minReplicas: 0, maxReplicas: 3, targetInFlight: 2 });
  assert.equal(spec.inference.replicas, undefined, "the scaler's to set");
  const back = fromSpec(spec);
  assert.equal(back.autoscale, true);
  assert.equal(back.maxReplicas, 3);
  assert.equal(toSpec({ ...back, autoscale: false }).inference.autoscaling, undefined);
  assert.equal(controlOf("inference.autoscaling.maxReplicas"), "maxReplicas");
});

test("controlOf: an API field path names the control that shows its error", () => {
  for (const [field, want] of [
    ["resources.gpu", "gpu"], ["inference.gpusPerReplica", "gpu"], ["inference.args.swap-space", "args"],
    ["sshPublicKeys[1]", "sshKeys"], ["labels.team", "labels"], ["inference.routing", "routing"], ["inference.adapters[1].source", "adapters"], ["spec.unknown", ""], ["", ""],
  ]) {
    assert.equal(controlOf(field), want, field);
  }
});

test("catalogueOf: what every rack of a location runs; null where one has not said", () => {
  const fleet = { locations: [{ name: "us", gpuModels: [
    { model: "A", catalogue: { images: ["debian-12"], jobTypes: ["gpu-container"], runtimes: [], maxVmCpus: 4, maxVmMemoryMiB: 8192 } },
    { model: "B", catalogue: { images: ["ubuntu-24.04"], jobTypes: ["gpu-container", "managed-inference"], runtimes: ["vllm"], maxVmCpus: 8, maxVmMemoryMiB: 4096 } },
  ] }, { name: "eu", gpuModels: [{ model: "A" }] }] };
  assert.deepEqual(catalogueOf(fleet, "us", ""), { images: ["debian-12", "ubuntu-24.04"], jobTypes: ["gpu-container", "managed-inference"], runtimes: ["vllm"], maxVmCpus: 8, maxVmMemoryMiB: 8192 });
  assert.deepEqual(catalogueOf(fleet, "us", "A").images, ["debian-12"]);
  assert.equal(catalogueOf(fleet, "eu", ""), null);
  assert.equal(catalogueOf(fleet, "mars", ""), null);
});
