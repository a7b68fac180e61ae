// The official OpenAI Node SDK (the `openai` package of web/package.json)
// against a real `cosmicac up`, through proxy-inference, an inference
// agent and the simulated runtime: what the SDK does by default must give
// the right answer (issue 32, item 4: openai 6.x asks for base64
// embeddings, which the simulated runtime answered with floats, decoded
// by the SDK into a 2-dimension vector of zeros).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { startPlatform, waitFor } from "./platform.mjs";

let p; // the platform
let client;

before(async () => {
  p = await startPlatform();
  const job = await p.api("POST", "/jobs", {
    type: "managed-inference", name: "embedder", location: "us", resources: { gpu: 1 },
    inference: { runtime: "vllm", model: "BAAI/bge-m3", servedModelName: "bge", args: { runner: "pooling" } },
  });
  await p.api("POST", "/jobs", {
    type: "managed-inference", name: "chat", location: "us", resources: { gpu: 1 },
    inference: { runtime: "vllm", model: "Qwen/Qwen3-8B", servedModelName: "qwen" },
  });
  const { key } = await p.api("POST", "/api-keys", { name: "node-sdk" });
  client = new OpenAI({ baseURL: p.url + "/inference/v1", apiKey: key, maxRetries: 0 });
  await waitFor("the embedding job to run", async () => (await p.api("GET", `/jobs/${job.id}`)).status.state === "running", 90000);
});

after(async () => {
  await p?.stop();
});

const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

test("embeddings: the SDK's default (base64) and floats give the same vector, of the model's dimensions", async () => {
  const input = ["the sky is blue", "grass is green"];
  const byDefault = await client.embeddings.create({ model: "bge", input }); // openai 6.x: encoding_format base64
  const floats = await client.embeddings.create({ model: "bge", input, encoding_format: "float" });
  assert.equal(byDefault.data.length, 2);
  for (const i of [0, 1]) {
    const a = byDefault.data[i].embedding;
    const b = floats.data[i].embedding;
    assert.equal(a.length, 8, `dimensions of the default (base64) embedding ${i}: ${JSON.stringify(a)}`);
    assert.equal(b.length, 8, `dimensions of the float embedding ${i}`);
    // base64 carries float32; JSON floats are float32 values printed short.
    assert.deepEqual(a, b.map(Math.fround), `embedding ${i}: base64 ${JSON.stringify(a)}, float ${JSON.stringify(b)}`);
    assert.ok(Math.abs(norm(a) - 1) < 1e-5, `embedding ${i} is not of unit length: ${JSON.stringify(a)}`);
  }
  assert.notDeepEqual(byDefault.data[0].embedding, byDefault.data[1].embedding);
  await assert.rejects(client.embeddings.create({ model: "bge", input, encoding_format: "hex" }), (e) => e.status === 400 && /encoding_format/.test(e.message));
});

test("chat n and the Responses API answer as vLLM does", async () => {
  await waitFor("the chat job to answer", async () => (await client.models.list()).data.some((m) => m.id === "qwen"), 90000);
  const cc = await waitFor("a chat completion", () => client.chat.completions.create({ model: "qwen", messages: [{ role: "user", content: "hi" }], n: 2, max_tokens: 3 }), 90000);
  assert.equal(cc.choices.length, 2);
  assert.notEqual(cc.choices[0].message.content, cc.choices[1].message.content);
  const r = await client.responses.create({ model: "qwen", input: "Say hello", max_output_tokens: 4 });
  assert.equal(r.output_text.trim().split(/\s+/).length, 4, JSON.stringify(r));
  const events = [];
  for await (const ev of await client.responses.create({ model: "qwen", input: "Say hello", max_output_tokens: 4, stream: true })) events.push(ev);
  assert.equal(events.at(-1).type, "response.completed");
  assert.equal(events.filter((e) => e.type === "response.output_text.delta").map((e) => e.delta).join(""), r.output_text);
});

// llama.cpp: the real engine (llama-server on the project's test embedding
// model, 128 dimensions) answers the SDK's default base64 request with the
// vector its float answer has. Under CI the engine must be there.
test("llama.cpp embeddings: the SDK's default (base64) from the real engine, of the model's dimension", async (t) => {
  const racks = await waitFor("the rack's catalogue", async () => {
    const l = await p.api("GET", "/racks");
    return l.items.some((r) => r.catalogue) && l;
  }, 30000);
  const has = racks.items.some((r) => (r.catalogue?.runtimes || []).includes("llama.cpp"));
  if (!has) {
    if (process.env.CI) assert.fail("CI is set, but no rack serves llama.cpp: COSMICAC_LLAMA_SERVER names no llama-server (hack/build-llama.sh)");
    t.skip("no llama-server: set COSMICAC_LLAMA_SERVER (hack/build-llama.sh builds one)");
    return;
  }
  const job = await p.api("POST", "/jobs", {
    type: "managed-inference", name: "tiny-embed", location: "us", resources: { gpu: 1 },
    inference: { runtime: "llama.cpp", model: "cosmicac/test-embed", servedModelName: "tiny-embed", args: { embeddings: "true", pooling: "mean" } },
  });
  await waitFor("the llama.cpp job to run", async () => (await p.api("GET", `/jobs/${job.id}`)).status.state === "running", 90000);
  const input = ["the sky is blue", "grass is green"];
  const byDefault = await waitFor("llama.cpp embeddings", () => client.embeddings.create({ model: "tiny-embed", input }), 90000);
  const floats = await client.embeddings.create({ model: "tiny-embed", input, encoding_format: "float" });
  for (const i of [0, 1]) {
    const a = byDefault.data[i].embedding;
    const b = floats.data[i].embedding;
    assert.equal(a.length, 128, `dimensions of the default (base64) embedding ${i}`);
    assert.equal(b.length, 128, `dimensions of the float embedding ${i}`);
    for (let k = 0; k < 128; k++) assert.ok(Math.abs(a[k] - b[k]) < 1e-5, `embedding ${i}[${k}]: base64 ${a[k]}, float ${b[k]}`);
  }
  assert.notDeepEqual(byDefault.data[0].embedding, byDefault.data[1].embedding);
});
