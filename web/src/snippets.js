// The Endpoint tab's code: how a client calls a Managed Inference Job's
// model with curl and the OpenAI SDKs. Pure: every value is quoted for the
// language it is pasted into (quote.js).
import { jsString, pyString, shellQuote } from "./quote.js";

// modelForClients answers the name clients call a model by
// (docs/inference.md, "Model names"): an open model (requireAuth off) by
// anyone, by its full name @TEAM/NAME; one that requires a key by its bare
// name, which only its own team's keys resolve.
export function modelForClients({ team, name, requireAuth }) {
  return requireAuth ? name : `@${team}/${name}`;
}

// endpointSnippets answers the curl, Python and JavaScript snippets that
// call model at base (the /inference/v1 URL). auth: the model requires an
// API key, read from $COSMICAC_API_KEY; without, no key is sent (the OpenAI
// SDKs want one, so they are given a placeholder and told to send no
// Authorization header). asr: a transcription model (Parakeet), else chat.
export function endpointSnippets({ base, model, auth, asr }) {
  const key = auth ? `  -H "Authorization: Bearer $COSMICAC_API_KEY" \\\n` : "";
  const curl = asr
    ? `curl ${shellQuote(`${base}/audio/transcriptions`)} \\\n${key}  --form-string ${shellQuote(`model=${model}`)} \\\n  -F file=@speech.wav`
    : `curl ${shellQuote(`${base}/chat/completions`)} \\\n${key}  -H "Content-Type: application/json" \\\n  -d ${shellQuote(JSON.stringify({ model, messages: [{ role: "user", content: "Hello!" }] }))}`;

  const pyClient = auth
    ? `import os\nfrom openai import OpenAI\n\nclient = OpenAI(base_url=${pyString(base)}, api_key=os.environ["COSMICAC_API_KEY"])\n`
    : `from openai import OpenAI, Omit\n\n# An open model: no API key is sent.\nclient = OpenAI(base_url=${pyString(base)}, api_key="none", default_headers={"Authorization": Omit()})\n`;
  const python = asr
    ? `${pyClient}with open("speech.wav", "rb") as f:\n    print(client.audio.transcriptions.create(model=${pyString(model)}, file=f).text)`
    : `${pyClient}reply = client.chat.completions.create(\n    model=${pyString(model)},\n    messages=[{"role": "user", "content": "Hello!"}],\n)\nprint(reply.choices[0].message.content)`;

  const jsClient = auth
    ? `const client = new OpenAI({ baseURL: ${jsString(base)}, apiKey: process.env.COSMICAC_API_KEY });\n`
    : `// An open model: no API key is sent.\nconst client = new OpenAI({ baseURL: ${jsString(base)}, apiKey: "none", defaultHeaders: { Authorization: null } });\n`;
  const js = asr
    ? `import fs from "node:fs";\nimport OpenAI from "openai";\n\n${jsClient}const t = await client.audio.transcriptions.create({ model: ${jsString(model)}, file: fs.createReadStream("speech.wav") });\nconsole.log(t.text);`
    : `import OpenAI from "openai";\n\n${jsClient}const reply = await client.chat.completions.create({\n  model: ${jsString(model)},\n  messages: [{ role: "user", content: "Hello!" }],\n});\nconsole.log(reply.choices[0].message.content);`;
  return { curl, python, js };
}
