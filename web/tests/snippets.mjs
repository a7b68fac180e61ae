// Test helpers that run the Endpoint tab's snippets, as shown, against
// stand-ins that print what they were given: a `curl` that prints its
// arguments, and `openai` packages for Python and Node.js that print the
// model and the client's settings instead of calling anything. So a test
// reads back the exact values each snippet passes, whatever they hold.
import { execFileSync, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

function scratch(f) {
  const dir = mkdtempSync(join(tmpdir(), "cosmicac-snippet-"));
  try {
    return f(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// runCurl runs a curl snippet with sh, and answers the arguments curl got.
export function runCurl(snippet, env = {}) {
  return scratch((dir) => {
    writeFileSync(join(dir, "curl"), "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done\n", { mode: 0o755 });
    const out = execFileSync("sh", ["-c", snippet], { cwd: dir, env: { ...process.env, ...env, PATH: `${dir}:${process.env.PATH}` }, encoding: "utf8" });
    return out.split("\0").slice(0, -1);
  });
}

// shellWord answers what sh makes of a quoted word: printf %s WORD.
export function shellWord(word) {
  return execFileSync("sh", ["-c", `printf %s ${word}`], { encoding: "utf8" });
}

// fakeOpenAIJS prints each create's arguments (but the file) with the
// client's base URL and the Authorization header it would send (null for
// none), as one JSON line.
const fakeOpenAIJS = `export default class OpenAI {
  constructor(opts) {
    const h = opts.defaultHeaders || {};
    const authorization = "Authorization" in h ? h.Authorization : "Bearer " + opts.apiKey;
    const create = async (args) => {
      const { file: _f, ...rest } = args;
      console.log(JSON.stringify({ baseURL: opts.baseURL, authorization, ...rest }));
      return { text: "", choices: [{ message: { content: "" } }] };
    };
    this.chat = { completions: { create } };
    this.audio = { transcriptions: { create } };
  }
}
`;

// runJS runs a JavaScript (Node.js) snippet with a stand-in "openai"
// package and answers what it passed.
export function runJS(snippet, env = {}) {
  return scratch((dir) => {
    mkdirSync(join(dir, "node_modules", "openai"), { recursive: true });
    writeFileSync(join(dir, "node_modules", "openai", "package.json"), JSON.stringify({ name: "openai", type: "module", main: "index.js" }));
    writeFileSync(join(dir, "node_modules", "openai", "index.js"), fakeOpenAIJS);
    writeFileSync(join(dir, "speech.wav"), "");
    writeFileSync(join(dir, "snippet.mjs"), snippet);
    const out = execFileSync("node", ["snippet.mjs"], { cwd: dir, env: { ...process.env, ...env }, encoding: "utf8" });
    return JSON.parse(out.split("\n")[0]);
  });
}

const fakeOpenAIPy = `import json, sys

class Omit:
    pass

class _NS:
    def __init__(self, **kw):
        self.__dict__.update(kw)

class OpenAI:
    def __init__(self, base_url=None, api_key=None, default_headers=None):
        h = default_headers or {}
        authorization = h.get("Authorization", "Bearer " + api_key)
        if isinstance(authorization, Omit):
            authorization = None
        def create(**kw):
            kw.pop("file", None)
            kw.update(baseURL=base_url, authorization=authorization)
            print(json.dumps(kw))
            return _NS(text="", choices=[_NS(message=_NS(content=""))])
        self.chat = _NS(completions=_NS(create=create))
        self.audio = _NS(transcriptions=_NS(create=create))
`;

// hasPython says whether python3 runs here.
export const hasPython = (() => {
  const r = spawnSync("python3", ["-c", "pass"]);
  return r.status === 0;
})();

// runPython runs a Python snippet with a stand-in "openai" module and
// answers what it passed.
export function runPython(snippet, env = {}) {
  return scratch((dir) => {
    writeFileSync(join(dir, "openai.py"), fakeOpenAIPy);
    writeFileSync(join(dir, "speech.wav"), "");
    writeFileSync(join(dir, "snippet.py"), snippet);
    const out = execFileSync("python3", ["snippet.py"], { cwd: dir, env: { ...process.env, ...env, PYTHONPATH: dir, PYTHONIOENCODING: "utf-8" }, encoding: "utf8" });
    return JSON.parse(out.split("\n")[0]);
  });
}

// parsePyString parses the Python string literal at the start of src (no
// prefix, single or double quotes, not triple) as the Python reference
// does, and answers its value and the rest of src. A reference for
// machines without python3, and a check of the literal's form with it.
export function parsePyString(src) {
  const q = src[0];
  if (q !== '"' && q !== "'") throw new Error(`not a string literal: ${src.slice(0, 20)}`);
  if (src.startsWith(q.repeat(3))) throw new Error("a triple-quoted literal");
  let out = "";
  let i = 1;
  const simple = { "\\": "\\", "'": "'", '"': '"', a: "\x07", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t", v: "\v", "\n": "" };
  const hex = (n) => {
    const h = src.slice(i, i + n);
    if (!new RegExp(`^[0-9a-fA-F]{${n}}$`).test(h)) throw new Error(`bad \\x/\\u/\\U escape at ${i}`);
    i += n;
    return String.fromCodePoint(parseInt(h, 16));
  };
  for (;;) {
    if (i >= src.length) throw new Error("unterminated string literal");
    const c = src[i++];
    if (c === q) return { value: out, rest: src.slice(i) };
    if (c === "\n" || c === "\r") throw new Error("a line break in a string literal");
    if (c !== "\\") {
      out += c;
      continue;
    }
    const e = src[i++];
    if (e in simple) out += simple[e];
    else if (e === "x") out += hex(2);
    else if (e === "u") out += hex(4);
    else if (e === "U") out += hex(8);
    else if (e >= "0" && e <= "7") {
      let o = e;
      while (o.length < 3 && src[i] >= "0" && src[i] <= "7") o += src[i++];
      out += String.fromCodePoint(parseInt(o, 8));
    } else if (e === "N") throw new Error("\\N{...} is not parsed here");
    else out += "\\" + e; // Python keeps an unknown escape as it is
  }
}

// pyArg answers the value of the string literal given to the keyword
// argument name (`name=`) in a Python snippet.
export function pyArg(snippet, name) {
  const i = snippet.indexOf(`${name}=`);
  if (i < 0) throw new Error(`no ${name}= in the snippet`);
  return parsePyString(snippet.slice(i + name.length + 1)).value;
}
