// Browser tests of the web interface: a real headless Chromium (Debian's,
// $CHROMIUM) driven by playwright-core against a real `cosmicac up`.
// Screenshots of every page go to $COSMICAC_TEST_OUT/screenshots; every
// page is checked with axe-core (no critical violations) at laptop and
// phone widths, light and dark.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { tmpdir } from "node:os";
import { chromium } from "playwright-core";
import { startPlatform, waitFor } from "./platform.mjs";
import { hasPython, pyArg, runCurl, runJS, runPython } from "./snippets.mjs";

const require = createRequire(import.meta.url);
const axeSource = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");
const OUT = process.env.COSMICAC_TEST_OUT || mkdtempSync(join(tmpdir(), "cosmicac-ui-"));
const SHOTS = join(OUT, "screenshots");
mkdirSync(SHOTS, { recursive: true });

let p; // the platform
let browser;
const results = { axe: [], load: null };

const ALICE = { user: "alice", password: "alice-password-1" }; // admin of ml
const VERA = { user: "vera", password: "vera-password-1" }; // viewer of ml
const BOB = { user: "bob", password: "bob-password-1" }; // owner of other

before(async () => {
  p = await startPlatform();
  for (const u of [ALICE, VERA, BOB]) await p.api("POST", "/users", { name: u.user, password: u.password });
  await p.api("POST", "/teams", { name: "ml", owner: "alice" });
  await p.api("PUT", "/teams/ml/members/alice", { role: "admin" }).catch(() => {}); // the last owner stays
  await p.api("PUT", "/teams/ml/members/vera", { role: "viewer" });
  await p.api("POST", "/teams", { name: "other", owner: "bob" });
  await p.api("POST", "/jobs", { type: "gpu-container", name: "bobs-secret-job", location: "us", image: "ubuntu-24.04", resources: { gpu: 1 } }, p.token, "other");
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"],
  });
});

after(async () => {
  writeFileSync(join(OUT, "ui-results.json"), JSON.stringify(results, null, 2));
  if (browser) await browser.close();
  if (p) await p.stop();
});

// sessions keeps each user's first signed-in browser state (the session
// cookie): later pages of the same user reuse it rather than sign in again,
// because the app-node allows a user 5 sign-ins and then one every 12 s
// (docs/security.md), fewer than these tests would make.
const sessions = new Map();

async function signIn(who, opts = {}) {
  const saved = sessions.get(who.user);
  const ctx = await browser.newContext({ viewport: opts.viewport || { width: 1280, height: 860 }, colorScheme: opts.colorScheme || "light",
    ...(saved ? { storageState: saved } : {}) });
  const page = await ctx.newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));
  await page.goto(p.url + "/");
  if (!saved) {
    await page.getByLabel("User name").fill(who.user);
    await page.getByRole("textbox", { name: "Password" }).fill(who.password);
    await page.getByRole("button", { name: "Sign in" }).click();
  }
  await page.getByRole("heading", { name: /^Jobs/ }).waitFor();
  if (!saved) sessions.set(who.user, await ctx.storageState());
  return page;
}

async function useTeam(page, team) {
  await page.getByLabel("Active team").selectOption(team);
  await page.getByRole("heading", { name: new RegExp(`Jobs\\s+in ${team}`) }).waitFor().catch(() => {});
}

// check screenshots the page and runs axe-core on it.
async function check(page, name) {
  await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
  await page.evaluate(axeSource);
  const r = await page.evaluate(async () => {
    // eslint-disable-next-line no-undef
    const res = await axe.run(document, { resultTypes: ["violations"] });
    return res.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map((n) => n.target.join(" ")).slice(0, 5) }));
  });
  results.axe.push({ page: name, violations: r });
  const critical = r.filter((v) => v.impact === "critical");
  assert.deepEqual(critical, [], `${name}: critical accessibility violations`);
  for (const v of r) console.log(`axe ${name}: ${v.impact} ${v.id}: ${v.help} (${v.nodes.join(", ")})`);
}

async function jobIdOf(page) {
  await page.waitForURL(/\/jobs\/[0-9a-f-]{36}/);
  return page.url().match(/\/jobs\/([0-9a-f-]{36})/)[1];
}

test("sign in with a wrong password, then the right one; a token signs in too", async () => {
  const ctx = await browser.newContext();
  const page = await ctx.newPage();
  await page.goto(p.url + "/jobs");
  await check(page, "signin");
  // The check finds what it looks for: an image without a text
  // alternative is a critical violation.
  await page.evaluate(axeSource);
  const bad = await page.evaluate(async () => {
    const img = document.createElement("img");
    img.src = "data:,";
    document.body.append(img);
    // eslint-disable-next-line no-undef
    const res = await axe.run(document, { resultTypes: ["violations"] });
    img.remove();
    return res.violations.map((v) => `${v.impact} ${v.id}`);
  });
  assert.ok(bad.includes("critical image-alt"), `axe on a bad page: ${bad}`);
  await page.getByLabel("User name").fill("alice");
  await page.getByRole("textbox", { name: "Password" }).fill("wrong");
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("alert").filter({ hasText: "Wrong user name" }).waitFor();
  await page.getByRole("radio", { name: "Access token" }).check();
  await page.getByLabel("Personal access token").fill(p.token);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: /^Jobs/ }).waitFor();
  // Signed in with a session: a reload keeps it, and it can change things
  // (the CSRF token comes again from whoami).
  await page.reload();
  await page.getByRole("heading", { name: /^Jobs/ }).waitFor();
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.getByRole("heading", { name: "Sign in to CosmicAC" }).waitFor();
  await page.goto(p.url + "/jobs");
  await page.getByRole("heading", { name: "Sign in to CosmicAC" }).waitFor();
  await ctx.close();
});

test("the keyboard alone signs in, opens a job and closes a dialog", async () => {
  const job = await p.api("POST", "/jobs", { type: "gpu-container", name: "by-keyboard", location: "us", image: "ubuntu-24.04", resources: { gpu: 1 } }, p.token, "ml");
  const ctx = await browser.newContext();
  const page = await ctx.newPage();
  await page.goto(p.url + "/");
  await page.getByLabel("User name").waitFor();
  // The user field has the focus; Tab moves to the password, Enter signs in.
  await page.keyboard.type(ALICE.user);
  await page.keyboard.press("Tab");
  await page.keyboard.type(ALICE.password);
  await page.keyboard.press("Enter");
  await page.getByRole("heading", { name: /^Jobs/ }).waitFor();
  await useTeam(page, "ml");
  // Tab to the job's link and open it with Enter.
  const link = page.getByRole("link", { name: "by-keyboard" });
  await link.waitFor();
  for (let i = 0; i < 60 && !(await link.evaluate((el) => el === document.activeElement)); i++) await page.keyboard.press("Tab");
  assert.ok(await link.evaluate((el) => el === document.activeElement), "Tab never reached the job's link");
  await page.keyboard.press("Enter");
  await page.waitForURL(new RegExp(job.id));
  const del = page.getByRole("button", { name: "Delete" });
  await del.focus();
  await page.keyboard.press("Enter");
  await page.getByRole("dialog").waitFor();
  await page.keyboard.press("Escape");
  await page.getByRole("dialog").waitFor({ state: "hidden" });
  assert.equal((await p.api("GET", `/jobs/${job.id}`, undefined, p.token, "ml")).id, job.id, "Escape deleted the job");
  await ctx.close();
  await p.api("DELETE", `/jobs/${job.id}?force=true`, undefined, p.token, "ml");
});

test("a GPU Container Job: create with the form, Active without reload, logs, terminal, duplicate, delete", async () => {
  const page = await signIn(ALICE);
  await useTeam(page, "ml");
  await check(page, "jobs-empty");
  await page.getByRole("link", { name: "New job", exact: true }).first().click();
  await page.getByRole("heading", { name: "New job" }).waitFor();
  // The API's validation shows next to the field.
  await page.getByLabel("Image").fill("");
  await page.getByLabel("Name", { exact: true }).fill("train-1");
  await page.locator("#e-image").waitFor();
  assert.match(await page.locator("#e-image").textContent(), /required/);
  await page.getByLabel("Image").fill("ubuntu-24.04");
  await page.getByLabel("GPU count").fill("2");
  await page.getByLabel("Labels").fill("team=vision");
  await page.locator("#e-image").waitFor({ state: "detached" });
  await page.getByRole("button", { name: "Show CLI command" }).click();
  const cmd = await page.locator("#cli-command pre").textContent();
  assert.match(cmd, /^cosmicac jobs create /);
  assert.match(cmd, /train-1/);
  await check(page, "new-job");
  await page.getByRole("button", { name: "Create job" }).click();
  const id = await jobIdOf(page);
  // Active without a reload: the page follows the job.
  const nav = await page.evaluate(() => performance.getEntriesByType("navigation").length);
  await page.locator("h1 .badge", { hasText: "Active" }).waitFor({ timeout: 60000 });
  assert.equal(await page.evaluate(() => performance.getEntriesByType("navigation").length), nav);
  await page.getByRole("heading", { name: "Status history" }).waitFor();
  await check(page, "job-overview");

  await page.getByRole("link", { name: "Logs" }).click();
  await page.locator(".logbox .rec.src-system").first().waitFor();
  await page.getByText(/Live only/).waitFor(); // no Loki here
  await check(page, "job-logs");

  await page.getByRole("link", { name: "Terminal" }).click();
  await page.locator(".xterm").waitFor();
  await page.getByText("connected", { exact: true }).waitFor();
  await page.locator(".xterm textarea").focus();
  await page.keyboard.type("echo hi-$((6*7))\n");
  await waitFor("the shell's answer", async () => (await page.locator(".xterm-rows").textContent()).includes("hi-42"), 20000);
  // The simulated rack's shell says it is on the platform's host, not a VM.
  assert.match(await page.locator(".xterm-rows").textContent(), /This shell runs on the ?platform's host, as .*it is not a VM/);
  await check(page, "job-terminal");

  // Restart asks first: cancelled, the job runs on untouched.
  const before = (await p.api("GET", `/jobs/${id}`, undefined, p.token, "ml")).status.history.length;
  await page.getByRole("button", { name: "Restart" }).click();
  await page.getByRole("dialog", { name: "Restart this job?" }).waitFor();
  await page.getByRole("dialog").getByRole("button", { name: "Cancel" }).click();
  await page.getByRole("dialog").waitFor({ state: "hidden" });
  const after = (await p.api("GET", `/jobs/${id}`, undefined, p.token, "ml")).status;
  assert.equal(after.state, "running");
  assert.equal(after.history.length, before, "a cancelled Restart restarted the job");
  await page.getByRole("button", { name: "Restart" }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Restart" }).click();
  await waitFor("the job to restart", async () => (await p.api("GET", `/jobs/${id}`, undefined, p.token, "ml")).status.history.some((h) => h.state === "restarting"));

  await page.getByRole("button", { name: "Duplicate" }).click();
  await page.getByRole("heading", { name: "Duplicate job" }).waitFor();
  assert.equal(await page.getByLabel("Name", { exact: true }).inputValue(), "train-1-copy");
  assert.equal(await page.getByLabel("Image").inputValue(), "ubuntu-24.04");
  assert.equal(await page.getByLabel("GPU count").inputValue(), "2");
  assert.equal(await page.getByLabel("Labels").inputValue(), "team=vision");
  await check(page, "job-duplicate");

  await page.goto(p.url + `/jobs/${id}`);
  await page.getByRole("button", { name: "Delete" }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Delete" }).click();
  await page.waitForURL(p.url + "/jobs");
  await waitFor("the job to go", async () => !(await p.api("GET", "/jobs?size=1000", undefined, p.token, "ml")).items.some((j) => j.id === id && j.status.state !== "deleting"));
  await page.context().close();
});

test("a Managed Inference Job and an API key: the snippet shown calls the endpoint", async () => {
  const page = await signIn(ALICE);
  await useTeam(page, "ml");
  await page.goto(p.url + "/jobs/new");
  await page.getByLabel(/Managed Inference Job/).check();
  await page.getByLabel("Name", { exact: true }).fill("chat");
  await page.getByLabel("Model", { exact: true }).fill("facebook/opt-125m");
  await page.getByLabel("GPUs per replica").fill("1");
  await page.getByLabel("Routing").selectOption("least-outstanding");
  await page.getByLabel("LoRA adapters").fill("sql=acme/opt-sql-lora");
  await page.getByLabel("Autoscale").check();
  await page.getByLabel("Minimum replicas").fill("1");
  await page.getByLabel("Maximum replicas").fill("2");
  await check(page, "new-inference-job");
  await page.getByRole("button", { name: "Create job" }).click();
  const id = await jobIdOf(page);
  await page.locator("h1 .badge", { hasText: "Active" }).waitFor({ timeout: 90000 });
  const made = (await p.api("GET", `/jobs/${id}`, undefined, p.token, "ml")).spec.inference;
  assert.equal(made.routing, "least-outstanding");
  assert.deepEqual(made.adapters, [{ name: "sql", source: "acme/opt-sql-lora" }]);
  assert.deepEqual(made.autoscaling, { minReplicas: 1, maxReplicas: 2, targetInFlight: 4, scaleDownDelay: 300 });

  await page.goto(p.url + "/team/keys");
  await page.getByLabel("Name").fill("playground");
  await page.getByRole("button", { name: "Create key" }).click();
  const key = (await page.getByLabel("The new key").textContent()).trim();
  assert.match(key, /\S{20,}/);
  assert.ok(await page.getByRole("button", { name: "Done" }).isDisabled(), "Done before saying the key is saved");
  await check(page, "team-keys-created");
  await page.getByLabel("I have saved the key").check();
  await page.getByRole("button", { name: "Done" }).click();
  await page.locator("table.keys tbody tr").filter({ hasText: "playground" }).waitFor();
  await check(page, "team-keys");

  await page.goto(p.url + `/jobs/${id}/endpoint`);
  await page.locator(".endpoint dd", { hasText: "least outstanding requests" }).waitFor();
  await page.locator(".endpoint dd code", { hasText: "facebook/opt-125m:sql" }).waitFor();
  await page.locator(".endpoint dd", { hasText: "1–2 replicas, 4 requests per replica" }).waitFor();
  const curl = await page.getByLabel("curl", { exact: true }).textContent();
  const js = await page.getByLabel("JavaScript", { exact: true }).textContent();
  await check(page, "job-endpoint");
  // The curl line as shown, with the key in the environment it names.
  const answer = execFileSync("sh", ["-c", curl], { env: { ...process.env, COSMICAC_API_KEY: key }, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  assert.match(JSON.parse(answer).choices[0].message.content, /\S/);
  // The OpenAI SDK snippet as shown, run by node with the real SDK.
  const file = join(process.cwd(), `.snippet-${process.pid}.mjs`);
  writeFileSync(file, js);
  try {
    const out = execFileSync("node", [file], { env: { ...process.env, COSMICAC_API_KEY: key }, encoding: "utf8" });
    assert.match(out, /\S/);
  } finally {
    execFileSync("rm", ["-f", file]);
  }
  // The playground streams an answer.
  await page.getByLabel("API key").fill(key);
  await page.getByRole("button", { name: "Send" }).click();
  await waitFor("the playground's answer", async () => ((await page.getByLabel("Answer").textContent()) || "").trim().length > 0, 30000);
  await check(page, "job-playground");

  // A rolling update from the job's page: the form shows the job's spec,
  // what is fixed at create greyed; the page then shows how it ended.
  await page.goto(p.url + `/jobs/${id}`);
  await page.getByRole("button", { name: "Update" }).click();
  await page.getByRole("heading", { name: "Update job" }).waitFor();
  assert.ok(await page.getByLabel("Name", { exact: true }).isDisabled(), "the name is fixed at create");
  assert.equal(await page.getByLabel("Model", { exact: true }).inputValue(), "facebook/opt-125m");
  await page.getByLabel("Runtime arguments").fill("max-model-len=4096");
  await check(page, "job-update");
  await page.getByRole("button", { name: "Update job" }).click();
  await page.waitForURL(p.url + `/jobs/${id}`);
  const updated = await p.api("GET", `/jobs/${id}`, undefined, p.token, "ml");
  assert.equal(updated.status.generation, 1);
  assert.deepEqual(updated.spec.inference.args, { "max-model-len": "4096" });
  await page.locator(".facts dd", { hasText: "generation 1 rolled out" }).waitFor({ timeout: 90000 });
  await page.locator("table.replicas td", { hasText: "(generation 1)" }).first().waitFor();
  await check(page, "job-rolled-out");
  await page.context().close();
});

// HOSTILE_MODEL is a served model name the API refuses at create now
// (cosmic.ValidServedModelName) but a job stored before may hold: quotes of
// every kind, a line break, shell and template substitutions.
const HOSTILE_MODEL = "x';id;'a\"+alert(1)+\"\\${HOME}`id`$(id)\nz";

// recordInference makes the page note every fetch it sends to /inference
// (the model it names, its credentials mode, its Authorization header) in
// window.__inference, and answers those fetches itself, as a model would.
async function recordInference(page) {
  await page.addInitScript(() => {
    window.__inference = [];
    const f = window.fetch;
    window.fetch = (input, init = {}) => {
      const url = String(input && input.url ? input.url : input);
      if (url.includes("/inference/")) {
        const b = init.body;
        const h = new Headers(init.headers || {});
        window.__inference.push({
          url,
          credentials: init.credentials === undefined ? "(default)" : init.credentials,
          authorization: h.get("Authorization"),
          model: typeof b === "string" ? JSON.parse(b).model : b instanceof FormData ? b.get("model") : null,
        });
      }
      return f(input, init);
    };
  });
  await page.route(/\/inference\/v1\/chat\/completions$/, (route) =>
    route.fulfill({ status: 200, contentType: "text/event-stream", body: 'data: {"choices":[{"delta":{"content":"a fake answer"}}]}\n\ndata: [DONE]\n\n' }));
  await page.route(/\/inference\/v1\/audio\/transcriptions$/, (route) => route.fulfill({ status: 200, json: { text: "a fake transcript" } }));
}

test("the Endpoint tab quotes every value it pastes into code; an open model is called by its full name", async () => {
  const job = await p.api("POST", "/jobs", { type: "managed-inference", name: "quoted", location: "us", resources: { gpu: 1 }, inference: { runtime: "vllm", model: "facebook/opt-125m" } }, p.token, "ml");
  const page = await signIn(ALICE);
  await useTeam(page, "ml");
  await recordInference(page);
  // The API answers the job as one stored before the check would be.
  let patch = (j) => j;
  await page.route(new RegExp(`/api/v1/jobs/${job.id}(\\?.*)?$`), async (route) => {
    try {
      const res = await route.fetch();
      const j = await res.json();
      await route.fulfill({ response: res, json: patch(j) });
    } catch {
      // the page went away during a watch
    }
  });
  const snippets = async () => ({
    curl: await page.getByLabel("curl", { exact: true }).textContent(),
    python: await page.getByLabel("Python", { exact: true }).textContent(),
    js: await page.getByLabel("JavaScript", { exact: true }).textContent(),
  });
  const base = p.url + "/inference/v1";
  const env = { COSMICAC_API_KEY: "sk-test" };

  // A transcription model that requires a key: its bare name, the key.
  patch = (j) => {
    Object.assign(j.spec.inference, { runtime: "parakeet", servedModelName: HOSTILE_MODEL, requireAuth: true });
    j.status.state = "running";
    return j;
  };
  await page.goto(p.url + `/jobs/${job.id}/endpoint`);
  await page.getByRole("heading", { name: "Playground" }).waitFor();
  assert.equal(await page.locator(".endpoint .facts dd code").nth(1).textContent(), HOSTILE_MODEL);
  let s = await snippets();
  let args = runCurl(s.curl, env);
  assert.equal(args[0], base + "/audio/transcriptions");
  assert.equal(args[args.indexOf("--form-string") + 1], `model=${HOSTILE_MODEL}`);
  assert.ok(args.includes("Authorization: Bearer sk-test"));
  let js = runJS(s.js, env);
  assert.deepEqual([js.model, js.baseURL, js.authorization], [HOSTILE_MODEL, base, "Bearer sk-test"]);
  assert.equal(pyArg(s.python, "model"), HOSTILE_MODEL);
  if (hasPython) {
    const py = runPython(s.python, env);
    assert.deepEqual([py.model, py.baseURL, py.authorization], [HOSTILE_MODEL, base, "Bearer sk-test"]);
  }
  await page.getByLabel("API key").fill("sk-cac-playground");
  await page.getByLabel("Audio file").setInputFiles({ name: "speech.wav", mimeType: "audio/wav", buffer: Buffer.from("RIFF") });
  await page.getByRole("button", { name: "Transcribe" }).click();
  await page.getByLabel("Transcript").getByText("a fake transcript").waitFor();
  let sent = await page.evaluate(() => window.__inference);
  assert.deepEqual(sent.map((r) => [r.model, r.credentials, r.authorization]), [[HOSTILE_MODEL, "omit", "Bearer sk-cac-playground"]]);

  // An open chat model: called by its full name, @TEAM/NAME, with no key.
  patch = (j) => {
    Object.assign(j.spec.inference, { servedModelName: HOSTILE_MODEL, requireAuth: false });
    j.status.state = "running";
    return j;
  };
  const full = `@ml/${HOSTILE_MODEL}`;
  await page.goto(p.url + `/jobs/${job.id}/endpoint`);
  await page.getByRole("heading", { name: "Playground" }).waitFor();
  assert.equal(await page.locator(".endpoint .facts dd code").nth(1).textContent(), full);
  assert.match(await page.locator(".endpoint .facts").textContent(), /bare name/);
  await check(page, "job-endpoint-open");
  s = await snippets();
  args = runCurl(s.curl, env);
  assert.equal(args[0], base + "/chat/completions");
  assert.equal(JSON.parse(args[args.indexOf("-d") + 1]).model, full);
  assert.ok(!args.some((a) => /^Authorization:/i.test(a)), "no key sent to an open model");
  js = runJS(s.js, env);
  assert.deepEqual([js.model, js.baseURL, js.authorization], [full, base, null]);
  assert.equal(pyArg(s.python, "model"), full);
  if (hasPython) {
    const py = runPython(s.python, env);
    assert.deepEqual([py.model, py.baseURL, py.authorization], [full, base, null]);
  }
  // The playground asks for the full name, with no key and no cookie.
  assert.equal(await page.getByLabel("API key").count(), 0);
  await page.getByRole("button", { name: "Send" }).click();
  await page.getByLabel("Answer").getByText("a fake answer").waitFor();
  sent = await page.evaluate(() => window.__inference);
  assert.deepEqual(sent.map((r) => [r.model, r.credentials, r.authorization]), [[full, "omit", null]]);
  await page.context().close();
  await p.api("DELETE", `/jobs/${job.id}?force=true`, undefined, p.token, "ml");
});

test("an open model answers its full name with no key: the curl line, the SDK snippet and the playground as shown", async () => {
  const job = await p.api("POST", "/jobs", { type: "managed-inference", name: "open-chat", location: "us", resources: { gpu: 1 }, inference: { runtime: "vllm", model: "facebook/opt-125m", servedModelName: "opt-open", requireAuth: false } }, p.token, "ml");
  const page = await signIn(ALICE);
  await useTeam(page, "ml");
  await page.goto(p.url + `/jobs/${job.id}/endpoint`);
  await page.locator("h1 .badge", { hasText: "Active" }).waitFor({ timeout: 90000 });
  assert.equal(await page.locator(".endpoint .facts dd code").nth(1).textContent(), "@ml/opt-open");
  const curl = await page.getByLabel("curl", { exact: true }).textContent();
  const js = await page.getByLabel("JavaScript", { exact: true }).textContent();
  const env = { ...process.env };
  delete env.COSMICAC_API_KEY;
  const answer = execFileSync("sh", ["-c", curl], { env, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  assert.match(JSON.parse(answer).choices[0].message.content, /\S/);
  const file = join(process.cwd(), `.snippet-${process.pid}.mjs`);
  writeFileSync(file, js);
  try {
    assert.match(execFileSync("node", [file], { env, encoding: "utf8" }), /\S/);
  } finally {
    execFileSync("rm", ["-f", file]);
  }
  await page.getByRole("button", { name: "Send" }).click();
  await waitFor("the playground's answer", async () => ((await page.getByLabel("Answer").textContent()) || "").trim().length > 0, 30000);
  await page.context().close();
  await p.api("DELETE", `/jobs/${job.id}?force=true`, undefined, p.token, "ml");
});

test("the new-job form shows the API's refusal of a served model name next to the field, and creates nothing", async () => {
  // Counted by name: another test's forced delete may still be finishing,
  // so the number of the team's jobs is not this test's to compare.
  const named = async () => (await p.api("GET", "/jobs?size=1000", undefined, p.token, "ml")).items.filter((j) => j.spec.name === "bad-name").length;
  assert.equal(await named(), 0, "a job named bad-name before the test");
  const page = await signIn(ALICE);
  await useTeam(page, "ml");
  await page.goto(p.url + "/jobs/new");
  await page.getByLabel(/Managed Inference Job/).check();
  await page.getByLabel("Name", { exact: true }).fill("bad-name");
  await page.getByLabel("Model", { exact: true }).fill("facebook/opt-125m");
  await page.getByLabel("Served model name").fill("my'model");
  await page.locator("#e-servedModelName").waitFor();
  assert.match(await page.locator("#e-servedModelName").textContent(), /not a served model name/);
  assert.equal(await page.getByLabel("Served model name").getAttribute("aria-invalid"), "true");
  await page.getByRole("button", { name: "Create job" }).click();
  await page.getByRole("alert").filter({ hasText: /not a served model name/ }).first().waitFor();
  assert.match(page.url(), /\/jobs\/new$/);
  assert.match(await page.locator("#e-servedModelName").textContent(), /not a served model name/);
  await check(page, "new-job-bad-served-name");
  assert.equal(await named(), 0, "a job was created");
  await page.context().close();
});

test("the Logs tab marks a step written from the job's VM, never as the platform's", async () => {
  const job = await p.api("POST", "/jobs", { type: "gpu-container", name: "forged-steps", location: "us", image: "ubuntu-24.04", resources: { gpu: 1 } }, p.token, "ml");
  const page = await signIn(ALICE);
  await useTeam(page, "ml");
  await page.goto(p.url + `/jobs/${job.id}/logs`);
  const platform = page.locator(".logbox .rec", { hasText: "accepted" }).first();
  await platform.waitFor({ timeout: 30000 });
  // Records as the monitor stores an agent's after marking them: the
  // stream is the agent's role (internal/monitor/confine.go). An operator
  // writes them as they are.
  const rec = { time: new Date().toISOString(), job: job.id, team: "ml", replica: 0, source: "system", ok: true };
  await p.rpc("wrk-monitor", "monitor.append", { records: [
    { ...rec, stream: "agent-instance", step: "import_disk", line: "forged: root disk imported" },
    { ...rec, stream: "agent-inference", step: "boot", line: "forged: replica 0 booted" },
  ] });
  for (const line of ["forged: root disk imported", "forged: replica 0 booted"]) {
    const forged = page.locator(".logbox .rec", { hasText: line });
    await forged.waitFor();
    assert.ok(await forged.getByText("from the job's VM").isVisible(), `${line}: no mark of the VM`);
    assert.equal(await forged.locator(".step").count(), 0, `${line}: shown as a platform step`);
  }
  assert.equal(await platform.getByText("from the job's VM").count(), 0, "a platform record marked as the VM's");
  assert.equal(await platform.locator(".step").count(), 1, "a platform step not shown as one");
  await check(page, "job-logs-vm");
  await page.context().close();
  await p.api("DELETE", `/jobs/${job.id}?force=true`, undefined, p.token, "ml");
});

test("a failed job shows its reason; a queued job its position", async () => {
  const failed = await p.api("POST", "/jobs", { type: "gpu-container", name: "will-fail", location: "us", image: "ubuntu-24.04", resources: { gpu: 1 }, command: ["sh", "-c", "exit 3"] }, p.token, "ml");
  // Fill the fleet (16 GPUs), then one more waits.
  const big = [];
  for (let i = 0; i < 2; i++) big.push(await p.api("POST", "/jobs", { type: "gpu-container", name: `big-${i}`, location: "us", image: "ubuntu-24.04", resources: { gpu: 8 } }, p.token, "ml"));
  const queued = await p.api("POST", "/jobs", { type: "gpu-container", name: "waits", location: "us", image: "ubuntu-24.04", resources: { gpu: 8 } }, p.token, "ml");
  const page = await signIn(ALICE);
  await useTeam(page, "ml");
  const failedRow = page.locator(`tr[data-job="${failed.id}"]`);
  await failedRow.locator(".badge", { hasText: "Failed" }).waitFor({ timeout: 60000 });
  assert.match(await failedRow.locator(".reason").textContent(), /\S/);
  assert.match(await failedRow.textContent(), /Fix:/);
  const queuedRow = page.locator(`tr[data-job="${queued.id}"]`);
  await queuedRow.locator(".badge", { hasText: "Queued" }).waitFor({ timeout: 60000 });
  // The position and what the head of the queue waits for, as the API says.
  const st = (await p.api("GET", `/jobs/${queued.id}`, undefined, p.token, "ml")).status;
  assert.ok(st.queuePosition >= 1, `queue position ${st.queuePosition}`);
  await queuedRow.getByText(new RegExp(`#${st.queuePosition} in queue`)).waitFor();
  const head = (await p.api("GET", "/jobs?statusState=queued&size=1000", undefined, p.token, "ml")).items.find((j) => j.status.queuePosition === 1);
  assert.ok(head && head.status.waitingFor, "the head of the queue says what it waits for");
  await page.locator(`tr[data-job="${head.id}"]`).getByText(`waiting for ${head.status.waitingFor}`).waitFor();
  await check(page, "jobs-list");
  // Filters: by status.
  await page.getByLabel("Failed").check();
  await page.locator(`tr[data-job="${queued.id}"]`).waitFor({ state: "detached" });
  await failedRow.waitFor();
  await page.getByLabel("Failed").uncheck();
  await page.getByLabel("Search by name").fill("wai");
  await page.locator(`tr[data-job="${failed.id}"]`).waitFor({ state: "detached" });
  await queuedRow.waitFor();
  await page.getByLabel("Search by name").fill("");
  await page.goto(p.url + `/jobs/${failed.id}`);
  await page.locator(".status-line .reason").waitFor();
  await check(page, "job-failed");
  for (const j of [...big, queued, failed]) await p.api("DELETE", `/jobs/${j.id}?force=true`, undefined, p.token, "ml");
  await page.context().close();
});

test("a viewer sees no action it may not take; another team's jobs never appear", async () => {
  const job = await p.api("POST", "/jobs", { type: "gpu-container", name: "seen-by-viewer", location: "us", image: "ubuntu-24.04", resources: { gpu: 1 } }, p.token, "ml");
  const page = await signIn(VERA);
  await useTeam(page, "ml");
  await page.locator(`tr[data-job="${job.id}"]`).waitFor();
  assert.equal(await page.getByRole("link", { name: "New job" }).count(), 0);
  assert.equal(await page.getByRole("link", { name: "Racks" }).count(), 0);
  assert.doesNotMatch(await page.locator("table.jobs").textContent(), /bobs-secret-job/);
  await page.goto(p.url + `/jobs/${job.id}`);
  await page.getByRole("heading", { name: "Status history" }).waitFor();
  for (const name of ["Restart", "Kill", "Delete", "Duplicate"]) {
    assert.equal(await page.getByRole("button", { name }).count(), 0, `a viewer sees ${name}`);
  }
  await check(page, "viewer-job");
  await page.goto(p.url + "/team");
  assert.equal(await page.getByRole("link", { name: "API keys" }).count(), 0);
  assert.equal(await page.getByRole("link", { name: "Audit log" }).count(), 0);
  await check(page, "viewer-team");
  // Bob's job is not there by ID either.
  const bobs = (await p.api("GET", "/jobs?size=1000", undefined, p.token, "other")).items[0];
  await page.goto(p.url + `/jobs/${bobs.id}`);
  await page.getByRole("heading", { name: "Job not found" }).waitFor();
  await page.context().close();
  await p.api("DELETE", `/jobs/${job.id}?force=true`, undefined, p.token, "ml");
});

// signInAsAdmin opens a page signed in with the bootstrap admin's token
// (a platform admin in no team).
async function signInAsAdmin() {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  const page = await ctx.newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));
  await page.goto(p.url + "/");
  await page.getByRole("radio", { name: "Access token" }).check();
  await page.getByLabel("Personal access token").fill(p.token);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: /^Jobs/ }).waitFor();
  return page;
}

const MIA = { user: "mia", password: "mia-password-1" }; // a member of ml, made by addMia

async function addMia() {
  await p.api("POST", "/users", { name: MIA.user, password: MIA.password }).catch(() => {}); // made by an earlier test
  await p.api("PUT", "/teams/ml/members/mia", { role: "member" });
}

test("the Quotas & usage page as a platform admin, a team admin, a member and a viewer", async () => {
  await addMia();
  await p.api("PUT", "/teams/ml/quotas/us", { gpus: 6 });
  await p.api("PUT", "/teams/other/quotas/us", { gpus: 3 });
  const job = await p.api("POST", "/jobs", { type: "gpu-container", name: "holds-two", location: "us", image: "ubuntu-24.04", resources: { gpu: 2 } }, p.token, "ml");
  await waitFor("the job to run", async () => (await p.api("GET", `/jobs/${job.id}`, undefined, p.token, "ml")).status.state === "running");
  // One chat with a key of ml's: the usage section's table and chart.
  const chatJob = await p.api("POST", "/jobs", { type: "managed-inference", name: "metered", location: "us", resources: { gpu: 1 }, inference: { runtime: "vllm", model: "facebook/opt-125m", servedModelName: "metered" } }, p.token, "ml");
  const key = await p.api("POST", "/api-keys", { name: "ui-metered" }, p.token, "ml");
  await waitFor("a chat with ml's key", async () => {
    const res = await fetch(p.url + "/inference/v1/chat/completions", { method: "POST", headers: { Authorization: `Bearer ${key.key}`, "Content-Type": "application/json" },
      body: JSON.stringify({ model: "metered", messages: [{ role: "user", content: "hi" }], max_tokens: 3 }) });
    return res.status === 200;
  }, 90000);
  await waitFor("the chat's usage", async () => (await p.api("GET", "/usage?groupBy=key", undefined, p.token, "ml")).items.some((u) => u.keyId === key.id));
  for (const [role, open, everyTeam] of [
    ["platform-admin", signInAsAdmin, true],
    ["team-admin", () => signIn(ALICE), false],
    ["member", () => signIn(MIA), false],
    ["viewer", () => signIn(VERA), false],
  ]) {
    const page = await open();
    await useTeam(page, "ml");
    await page.goto(p.url + "/team/quotas");
    await page.getByRole("heading", { name: "Quotas", exact: true }).waitFor();
    const ml = page.locator("table.quotas tr", { has: page.locator("td", { hasText: /^ml$/ }) });
    await ml.waitFor();
    // Jobs of earlier tests may hold more of ml's GPUs: at least the job's 2.
    const used = Number(((await ml.textContent()).match(/(\d+) \/ 6$/) || [])[1]);
    assert.ok(used >= 2, `${role}: ml's quota row: ${await ml.textContent()}`);
    await page.locator(".chart svg, p.notice.error, .notice.error").first().waitFor();
    assert.equal(await page.getByRole("alert").count(), 0, `${role}: an error on the page: ${await page.getByRole("alert").allTextContents()}`);
    const now = Number(((await page.locator(".chart.gpus svg").getAttribute("aria-label")).match(/ml: now (\d+)/) || [])[1]);
    assert.ok(now >= 2, `${role}: the usage chart shows ml holding ${now} GPUs now, want at least the job's 2`);
    // The inference usage: the key's row, the chart's totals, the CSV link for the team.
    const metered = page.locator("table.usage tr", { hasText: "ui-metered" });
    await metered.waitFor();
    assert.match(await metered.textContent(), /@ml\/metered/, `${role}: the usage row`);
    assert.match(await page.locator(".chart.tokens svg").getAttribute("aria-label"), /in [1-9]\d* requests/, `${role}: the tokens chart`);
    const csv = new URL(await page.getByRole("link", { name: "Download CSV" }).getAttribute("href"), p.url);
    assert.equal(csv.searchParams.get("team"), everyTeam ? "*" : "ml", `${role}: the CSV link's team`);
    const other = page.locator("table.quotas tr", { has: page.locator("td", { hasText: /^other$/ }) });
    assert.equal(await other.count(), everyTeam ? 1 : 0, `${role}: another team's quota shown`);
    assert.equal(/other: now/.test(await page.locator(".chart.gpus svg").getAttribute("aria-label")), everyTeam, `${role}: another team's usage shown`);
    await check(page, `quotas-${role}`);
    await page.context().close();
  }
  // The CSV a signed-in page downloads: the team's, with the key's line.
  const page = await signIn(ALICE);
  await useTeam(page, "ml");
  const csvText = await page.evaluate(async () => (await fetch("/api/v1/usage?format=csv&groupBy=key,model&team=ml")).text());
  assert.match(csvText, /^key_id,key_name,model,requests,prompt_tokens,completion_tokens,total_tokens,gpu_seconds\n/, "the CSV's header");
  assert.match(csvText, new RegExp(`${key.id},ui-metered,@ml/metered,`), "the CSV's key line");
  await page.context().close();
  await p.api("DELETE", `/jobs/${job.id}?force=true`, undefined, p.token, "ml");
  await p.api("DELETE", `/jobs/${chatJob.id}?force=true`, undefined, p.token, "ml");
  await p.api("DELETE", `/api-keys/${key.id}`, undefined, p.token, "ml");
  await p.api("DELETE", "/teams/ml/quotas/us");
  await p.api("DELETE", "/teams/other/quotas/us");
  await p.api("DELETE", "/teams/ml/members/mia");
});

test("a member makes an API key for the team's models and sees only the keys they made", async () => {
  await addMia();
  const admins = await p.api("POST", "/api-keys", { name: "admins-key" }, p.token, "ml");
  const page = await signIn(MIA);
  await useTeam(page, "ml");
  await page.goto(p.url + "/team");
  await page.getByRole("link", { name: "API keys" }).click();
  await page.getByText("You see the keys you made").waitFor();
  await page.getByLabel("Name").fill("mias-key");
  await page.getByRole("button", { name: "Create key" }).click();
  const secret = (await page.getByLabel("The new key").textContent()).trim();
  assert.match(secret, /^sk-cac-/);
  await page.getByLabel("I have saved the key").check();
  await page.getByRole("button", { name: "Done" }).click();
  const row = page.locator("table.keys tr", { hasText: "mias-key" });
  await row.waitFor();
  assert.equal(await page.locator(`tr[data-key="${admins.id}"]`).count(), 0, "a member sees a key another user made");
  await check(page, "member-api-keys");
  const keys = (await p.api("GET", "/api-keys", undefined, p.token, "ml")).items;
  const mias = keys.find((k) => k.name === "mias-key");
  assert.ok(mias && mias.createdBy === "mia" && mias.team === "ml", `the key in the API: ${JSON.stringify(keys)}`);
  await row.getByRole("button", { name: "Revoke" }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Revoke" }).click();
  await row.waitFor({ state: "detached" });
  await page.context().close();
  await p.api("DELETE", `/api-keys/${admins.id}`, undefined, p.token, "ml");
  await p.api("DELETE", "/teams/ml/members/mia");
});

test("a team admin adds a datastore from the team page; its secret key never comes back; a viewer reads it and cannot change it", async () => {
  const page = await signIn(ALICE);
  await useTeam(page, "ml");
  await page.goto(p.url + "/team/datastores");
  await page.getByText("Secret keys are never shown").waitFor();
  await page.getByLabel("Alias").fill("lake");
  await page.getByLabel("Endpoint").fill("https://s3.example.net");
  await page.getByLabel("Access key").fill("AKIAWEBTEST00042");
  await page.getByLabel("Secret key").fill("web-secret-never-shown");
  await page.getByRole("button", { name: "Add datastore" }).click();
  const row = page.locator('tr[data-datastore="lake"]');
  await row.waitFor();
  assert.match(await row.textContent(), /https:\/\/s3\.example\.net.*us-east-1.*…0042.*alice/);
  assert.equal(await page.getByLabel("Secret key").inputValue(), "", "the form keeps the secret key");
  assert.ok(!(await page.content()).includes("web-secret-never-shown"), "the page holds the secret key");
  await check(page, "team-datastores");
  await page.context().close();

  const viewer = await signIn(VERA);
  await useTeam(viewer, "ml");
  await viewer.goto(p.url + "/team/datastores");
  await viewer.locator('tr[data-datastore="lake"]').waitFor();
  await viewer.getByText("The team's admins add and remove them").waitFor();
  assert.equal(await viewer.getByRole("button", { name: "Add datastore" }).count(), 0, "a viewer sees the add form");
  assert.equal(await viewer.getByRole("button", { name: "Remove" }).count(), 0, "a viewer sees Remove");
  assert.ok(!(await viewer.content()).includes("web-secret-never-shown"));
  await viewer.context().close();

  const again = await signIn(ALICE);
  await useTeam(again, "ml");
  await again.goto(p.url + "/team/datastores");
  const r = again.locator('tr[data-datastore="lake"]');
  await r.getByRole("button", { name: "Remove" }).click();
  await again.getByRole("dialog").getByRole("button", { name: "Remove" }).click();
  await r.waitFor({ state: "detached" });
  await again.context().close();
  assert.equal((await p.api("GET", "/datastores", undefined, p.token, "ml")).total, 0);
});

test("the team's standalone volumes: what a job left is listed with its size; one who operates jobs deletes it, a viewer cannot", async () => {
  const until = async (what, f) => {
    for (let i = 0; i < 600; i++) {
      const v = await f();
      if (v) return v;
      await new Promise((r) => setTimeout(r, 200));
    }
    throw new Error(`timed out waiting for ${what}`);
  };
  const volumes = [{ mountPath: "/scratch", permission: "RW", standalone: { name: "web-scratch" } }];
  const job = await p.api("POST", "/jobs", { type: "gpu-container", name: "leaves-files", location: "us", image: "ubuntu-24.04", resources: { gpu: 1 }, volumes,
    command: ["sh", "-c", 'head -c 3072 /dev/zero > "$HOME/scratch/data.bin"'] }, p.token, "ml");
  await until("the job to end", async () => (await p.api("GET", `/jobs/${job.id}`, undefined, p.token, "ml")).status.state === "stopped");
  await until("the rack to report the volume, free", async () => (await p.api("GET", "/volumes", undefined, p.token, "ml")).items.some((v) => v.name === "web-scratch" && !v.job));

  const viewer = await signIn(VERA);
  await useTeam(viewer, "ml");
  await viewer.goto(p.url + "/team/volumes");
  const vrow = viewer.locator('tr[data-volume="web-scratch"]');
  await vrow.waitFor();
  assert.match(await vrow.textContent(), /web-scratch.*3 KiB.*no job/);
  await viewer.getByText("Members who operate jobs delete them").waitFor();
  assert.equal(await viewer.getByRole("button", { name: "Delete" }).count(), 0, "a viewer sees Delete");
  await viewer.context().close();

  const page = await signIn(ALICE);
  await useTeam(page, "ml");
  await page.goto(p.url + "/team/volumes");
  const row = page.locator('tr[data-volume="web-scratch"]');
  await row.waitFor();
  await check(page, "team-volumes");
  await row.getByRole("button", { name: "Delete" }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Delete" }).click();
  await row.waitFor({ state: "detached" });
  await page.context().close();
  assert.ok(!(await p.api("GET", "/volumes", undefined, p.token, "ml")).items.some((v) => v.name === "web-scratch"), "the volume is still listed");
  await p.api("DELETE", `/jobs/${job.id}`, undefined, p.token, "ml");
});

test("the only platform admin's last token is not revoked from the page: the refusal says why", async () => {
  const page = await signInAsAdmin();
  await page.goto(p.url + "/team/tokens");
  const row = page.locator("tr", { hasText: "bootstrap admin token" });
  await row.getByRole("button", { name: "Revoke" }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Revoke" }).click();
  await page.getByRole("alert").filter({ hasText: "no platform admin a way to sign in" }).waitFor();
  assert.equal(await row.count(), 1, "the token's row is gone");
  assert.equal((await fetch(p.url + "/api/v1/whoami", { headers: { Authorization: `Bearer ${p.token}` } })).status, 200);
  await check(page, "admin-last-token");
  await page.context().close();
});

test("racks, teams and settings pages, at laptop and phone widths, light and dark", async () => {
  for (const [w, h, scheme] of [[1280, 860, "light"], [390, 844, "dark"]]) {
    const page = await signIn(ALICE, { viewport: { width: w, height: h }, colorScheme: scheme });
    await useTeam(page, "ml");
    const tag = `${w}-${scheme}`;
    await check(page, `jobs-${tag}`);
    for (const [path, heading, name] of [
      ["/team", /Team ml/, "team-members"],
      ["/team/quotas", /Team ml/, "team-quotas"],
      ["/team/audit", /Team ml/, "team-audit"],
      ["/team/tokens", /Team ml/, "team-tokens"],
      ["/jobs/new", /New job/, "new-job"],
    ]) {
      await page.goto(p.url + path);
      await page.getByRole("heading", { name: heading }).first().waitFor();
      await page.waitForLoadState("networkidle").catch(() => {});
      await check(page, `${name}-${tag}`);
    }
    await page.context().close();
  }
  // Racks: platform admins only; each node's GPUs drawn.
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  const page = await ctx.newPage();
  await page.goto(p.url + "/");
  await page.getByRole("radio", { name: "Access token" }).check();
  await page.getByLabel("Personal access token").fill(p.token);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("link", { name: "Racks" }).click();
  await page.locator(".rack .gpus").first().waitFor();
  assert.equal(await page.locator(".rack").first().locator(".gpu").count(), 16);
  await check(page, "racks");
  // Register a rack, see it, remove it.
  await page.getByLabel("ID", { exact: true }).fill("extra-eu-1");
  await page.getByLabel("Location").fill("eu");
  await page.getByLabel("GPU model").fill("L40S");
  await page.getByLabel("Worker key").fill("ab".repeat(32));
  await page.getByRole("button", { name: "Register" }).click();
  const rack = page.locator('.rack[data-rack="extra-eu-1"]');
  await rack.waitFor();
  assert.ok((await p.api("GET", "/racks")).items.some((r) => r.id === "extra-eu-1"));
  await rack.getByRole("button", { name: "Remove" }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Remove" }).click();
  await rack.waitFor({ state: "detached" });
  assert.ok(!(await p.api("GET", "/racks")).items.some((r) => r.id === "extra-eu-1"));
  // Members: a role changed in the page is the API's.
  await page.getByLabel("Active team").selectOption("ml");
  await page.goto(p.url + "/team");
  await page.getByLabel("Role of vera").selectOption("member");
  await waitFor("vera's new role", async () => (await p.api("GET", "/teams/ml/members")).items.find((m) => m.user === "vera").role === "member");
  await page.getByLabel("Role of vera").selectOption("viewer");
  await waitFor("vera's role back", async () => (await p.api("GET", "/teams/ml/members")).items.find((m) => m.user === "vera").role === "viewer");
  // A personal access token, created and revoked.
  await page.goto(p.url + "/team/tokens");
  await page.getByLabel("Name").fill("from-the-page");
  await page.getByRole("button", { name: "Create token" }).click();
  const secret = (await page.getByLabel("The new token").textContent()).trim();
  const who = await fetch(p.url + "/api/v1/whoami", { headers: { Authorization: `Bearer ${secret}` } });
  assert.equal(who.status, 200);
  await page.getByLabel("I have saved the token").check();
  await page.getByRole("button", { name: "Done" }).click();
  await page.locator("tr", { hasText: "from-the-page" }).getByRole("button", { name: "Revoke" }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Revoke" }).click();
  await page.locator("tr", { hasText: "from-the-page" }).waitFor({ state: "detached" });
  assert.equal((await fetch(p.url + "/api/v1/whoami", { headers: { Authorization: `Bearer ${secret}` } })).status, 401);
  await page.goto(p.url + "/team/quotas");
  await page.locator(".chart svg, .chart + p, p.empty").first().waitFor();
  await check(page, "quotas-admin");
  await ctx.close();
});

test("the job page shows what the rack gave each replica next to what was asked", async () => {
  const job = await p.api("POST", "/jobs", { type: "gpu-container", name: "given", location: "us", image: "ubuntu-24.04", resources: { gpu: 1 } }, p.token, "ml");
  const given = await waitFor("the replica's given resources", async () => (await p.api("GET", `/jobs/${job.id}`, undefined, p.token, "ml")).status.replicas[0].given);
  assert.deepEqual({ cpus: given.cpus, memoryMiB: given.memoryMiB, gpus: given.gpus }, { cpus: 8, memoryMiB: 64 * 1024, gpus: 1 }); // the simulated rack gives the spec's share
  const page = await signIn(ALICE);
  await useTeam(page, "ml");
  await page.goto(p.url + `/jobs/${job.id}`);
  await page.locator('tr[data-replica="0"] td.given', { hasText: "8 vCPU, 64 GiB, 1 GPU" }).waitFor();
  assert.match(await page.locator("dl.facts").textContent(), /8 cores \/ 64 GiB asked/);
  assert.equal(await page.getByRole("columnheader", { name: "Given" }).count(), 1);
  await check(page, "job-given");
  await page.context().close();
  await p.api("DELETE", `/jobs/${job.id}?force=true`, undefined, p.token, "ml");
});

test("the new-job form offers the images of the location's catalogue and says what a VM there gets", async () => {
  // The simulated rack reports its catalogue: any image, both job types.
  const fleet = await p.api("GET", "/fleet", undefined, p.token, "ml");
  const us = fleet.locations.find((l) => l.name === "us").gpuModels[0].catalogue;
  assert.deepEqual(us.jobTypes, ["gpu-container", "managed-inference"]);
  assert.equal(us.images, undefined);
  const page = await signIn(ALICE);
  await useTeam(page, "ml");
  await page.goto(p.url + "/jobs/new");
  await page.getByRole("textbox", { name: "Image" }).waitFor(); // any image: free text
  // A rack with a catalogue of images and caps, as a QEMU rack reports it.
  await page.route(/\/api\/v1\/fleet(\?|$)/, async (route) => {
    const res = await route.fetch();
    const fl = await res.json();
    for (const l of fl.locations) for (const m of l.gpuModels) m.catalogue = { images: ["debian-12", "ubuntu-24.04"], jobTypes: ["gpu-container"], maxVmCpus: 1, maxVmMemoryMiB: 512 };
    await route.fulfill({ response: res, json: fl });
  });
  await page.goto(p.url + "/jobs/new");
  const image = page.getByRole("combobox", { name: "Image" });
  await image.waitFor();
  assert.deepEqual(await image.locator("option").allTextContents(), ["debian-12", "ubuntu-24.04"]);
  assert.equal(await image.inputValue(), "ubuntu-24.04");
  assert.ok(await page.getByRole("radio", { name: /Managed Inference Job/ }).isDisabled(), "a job type the racks do not run is offered");
  await page.getByText("The racks of us do not run it.").waitFor();
  await page.getByText(/A VM in us gets at most 1 vCPU, whatever is asked/).waitFor();
  await page.getByText(/A VM in us gets at most 0.5 GiB, whatever is asked/).waitFor();
  await image.selectOption("debian-12");
  await check(page, "new-job-catalogue");
  await page.context().close();
});

test("a member's Racks page is the read-only view of the locations: no error, no admin form", async () => {
  const page = await signIn(VERA);
  await useTeam(page, "ml");
  assert.equal(await page.getByRole("link", { name: "Racks" }).count(), 0);
  await page.getByRole("link", { name: "Locations" }).click();
  await page.getByRole("heading", { name: "Locations" }).waitFor();
  const row = page.locator('tr[data-location="us"]');
  await row.waitFor();
  assert.match(await row.textContent(), /GH100_H100_SXM5_80GB/);
  // llama.cpp is in the catalogue when the platform has the engine (hack/test.sh names it).
  const runtimes = process.env.COSMICAC_LLAMA_SERVER ? "llama.cpp, parakeet, vllm" : "parakeet, vllm";
  assert.equal((await row.locator(".catalogue").textContent()).includes(`gpu-container, managed-inference jobs; runtimes ${runtimes}; any image`), true,
    `catalogue ${await row.locator(".catalogue").textContent()}, want runtimes ${runtimes}`);
  assert.equal(await page.getByRole("heading", { name: "Register a rack" }).count(), 0);
  assert.equal(await page.getByRole("button", { name: "Remove" }).count(), 0);
  assert.equal(await page.locator(".notice.error, [role=alert]").count(), 0);
  assert.doesNotMatch(await page.locator("main").textContent(), /sim-us-1/); // no rack, node or worker named
  await check(page, "locations-member");
  await page.context().close();
});

test("the jobs page's first load with 1,000 jobs", async () => {
  await p.api("POST", "/teams", { name: "load", owner: "alice" });
  const jobs = [];
  for (let i = 0; i < 1000; i += 50) {
    const batch = [];
    for (let k = i; k < i + 50; k++) {
      batch.push(p.api("POST", "/jobs", { type: "gpu-container", name: `load-${k}`, location: "us", image: "ubuntu-24.04", resources: { gpu: 8 } }, p.token, "load"));
    }
    jobs.push(...(await Promise.all(batch)));
  }
  const page = await signIn(ALICE);
  await useTeam(page, "load");
  await page.locator("table.jobs tbody tr").first().waitFor();
  const times = [];
  for (let i = 0; i < 3; i++) {
    const t0 = Date.now();
    await page.goto(p.url + "/jobs");
    await page.locator("table.jobs tbody tr").nth(499).waitFor();
    times.push(Date.now() - t0);
  }
  times.sort((a, b) => a - b);
  results.load = { jobs: 1000, rowsShown: await page.locator("table.jobs tbody tr").count(), ms: times };
  console.log(`first load of /jobs with 1000 jobs (500 a page): ${times.join(", ")} ms (median ${times[1]})`);
  await check(page, "jobs-1000");
  await page.context().close();
});
