// Builds the web interface into internal/webui/dist, which the binary
// embeds. The output depends only on src/ and the versions pinned in
// package-lock.json: CI rebuilds it and fails if it differs from the
// committed files (hack/webui.sh --check).
import * as esbuild from "esbuild";
import { copyFile, mkdir, readdir, rm, stat } from "node:fs/promises";

const out = new URL("../internal/webui/dist/", import.meta.url).pathname;
await rm(out, { recursive: true, force: true });
await mkdir(out, { recursive: true });

const result = await esbuild.build({
  entryPoints: { app: "src/main.jsx", style: "src/app.css" },
  bundle: true,
  splitting: true, // the terminal (xterm) loads only on the Terminal tab
  format: "esm",
  minify: true,
  target: ["chrome120", "firefox120", "safari17"],
  jsx: "automatic",
  jsxImportSource: "preact",
  outdir: out,
  entryNames: "[name]",
  chunkNames: "chunk-[hash]",
  assetNames: "asset-[hash]",
  legalComments: "linked",
  metafile: true,
  logLevel: "warning",
});
await copyFile("src/index.html", out + "index.html");

let total = 0;
for (const f of (await readdir(out)).sort()) {
  const { size } = await stat(out + f);
  total += size;
  console.log(`${f.padEnd(28)} ${String(size).padStart(8)} B`);
}
console.log(`${"total".padEnd(28)} ${String(total).padStart(8)} B`);
if (Object.keys(result.metafile.outputs).length === 0) throw new Error("nothing built");
