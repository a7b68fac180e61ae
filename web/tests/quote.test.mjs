// The quoting of values pasted into the Endpoint tab's snippets
// (web/src/quote.js, web/src/snippets.js): hostile values round-trip
// exactly through sh, Python and JavaScript, and the snippets built for a
// hostile model name pass that name, and nothing else, to curl and to the
// OpenAI SDKs. Needs no platform and no browser.
import { test } from "node:test";
import assert from "node:assert/strict";
import { jsString, pyString, shellQuote } from "../src/quote.js";
import { endpointSnippets, modelForClients } from "../src/snippets.js";
import { hasPython, parsePyString, pyArg, runCurl, runJS, runPython, shellWord } from "./snippets.mjs";
import { execFileSync } from "node:child_process";

// HOSTILE are values a stored job may hold (names stored before
// cosmic.ValidServedModelName, or anything a future field may pass).
export const HOSTILE = [
  "x';id;'",
  'a"+alert(1)+"',
  "back\\slash\\",
  "\\'\\\"",
  "new\nline\r\n",
  "${process.exit(3)}",
  "`id`$(id)",
  "'\"'\"'",
  "@ml/Qwen/Qwen3-8B",
  "tab\there",
  "\u2028\u2029 \u202e bidi",
  "über 😀 中文",
  "#!-- */ </script>",
  "",
];

test("shellQuote: sh reads back every value", () => {
  for (const v of HOSTILE) assert.equal(shellWord(shellQuote(v)), v, `value ${JSON.stringify(v)}`);
});

test("pyString: Python reads back every value, and so does the reference parser", () => {
  for (const v of [...HOSTILE, "\0nul", "\x7f\x80\x9f"]) {
    const lit = pyString(v);
    assert.match(lit, /^"[\x20-\x7e]*"$/, "an ASCII literal on one line");
    assert.equal(parsePyString(lit).value, v, `reference parser: ${JSON.stringify(v)}`);
  }
  if (!hasPython) return;
  const lits = [...HOSTILE, "\0nul"].map(pyString);
  const out = execFileSync("python3", ["-c", `import json\nprint(json.dumps([${lits.join(", ")}]))`], { encoding: "utf8" });
  assert.deepEqual(JSON.parse(out), [...HOSTILE, "\0nul"]);
});

test("jsString: JavaScript and JSON read back every value", () => {
  for (const v of [...HOSTILE, "\0nul"]) {
    const lit = jsString(v);
    assert.match(lit, /^"[\x20-\x7e]*"$/, "an ASCII literal on one line");
    assert.equal(JSON.parse(lit), v);
    assert.equal((0, eval)(`(${lit})`), v);
  }
});

test("modelForClients: an open model by its full name, one that needs a key by its bare name", () => {
  assert.equal(modelForClients({ team: "ml", name: "Qwen/Qwen3-8B", requireAuth: false }), "@ml/Qwen/Qwen3-8B");
  assert.equal(modelForClients({ team: "ml", name: "Qwen/Qwen3-8B", requireAuth: true }), "Qwen/Qwen3-8B");
});

test("the snippets pass a hostile model name and base URL exactly", () => {
  const base = "http://127.0.0.1:8080/x'y\"$(id)`id`/inference/v1";
  for (const asr of [false, true]) {
    for (const auth of [true, false]) {
      // Each value alone through sh and the reference parser; all of them
      // in one name through node and python3, which take longer to start.
      const all = HOSTILE.join("");
      for (const model of [...HOSTILE.filter((v) => v !== ""), all]) {
        const what = `${asr ? "parakeet" : "vllm"}, ${auth ? "a key" : "open"}, ${JSON.stringify(model)}`;
        const s = endpointSnippets({ base, model, auth, asr });
        const env = { COSMICAC_API_KEY: "sk-test" };
        const args = runCurl(s.curl, env);
        assert.equal(args[0], `${base}/${asr ? "audio/transcriptions" : "chat/completions"}`, what);
        assert.equal(args.includes("Authorization: Bearer sk-test"), auth, what);
        if (asr) {
          assert.equal(args[args.indexOf("--form-string") + 1], `model=${model}`, what);
        } else {
          assert.equal(JSON.parse(args[args.indexOf("-d") + 1]).model, model, what);
        }
        assert.equal(pyArg(s.python, "model"), model, what);
        assert.equal(pyArg(s.python, "base_url"), base, what);
        if (model !== all) continue;
        const js = runJS(s.js, env);
        assert.deepEqual([js.model, js.baseURL, js.authorization], [model, base, auth ? "Bearer sk-test" : null], what);
        if (hasPython) {
          const py = runPython(s.python, env);
          assert.deepEqual([py.model, py.baseURL, py.authorization], [model, base, auth ? "Bearer sk-test" : null], what);
        }
      }
    }
  }
});
