// Quoting of values pasted into code that the page shows to be copied and
// run (the Endpoint tab's snippets): each answers a literal that the
// language reads back as exactly the value, whatever it holds. A model
// name is checked by the API at create (cosmic.ValidServedModelName), but
// a job stored before may hold any name, and the page never relies on it.

// shellQuote answers s as one POSIX shell word: single-quoted, each ' as
// '\'' (nothing is special inside single quotes but the quote itself).
export function shellQuote(s) {
  return "'" + String(s).replaceAll("'", "'\\''") + "'";
}

const hex = (n, w) => n.toString(16).padStart(w, "0");

// pyString answers s as a Python str literal in double quotes, in ASCII:
// \\ and \" escaped, every other character outside printable ASCII as \xHH,
// \uHHHH or \UHHHHHHHH, so no line break, quote or invisible character
// stands in the source.
export function pyString(s) {
  let out = '"';
  for (const ch of String(s)) {
    const c = ch.codePointAt(0);
    if (ch === "\\" || ch === '"') out += "\\" + ch;
    else if (c >= 0x20 && c < 0x7f) out += ch;
    else if (c < 0x100) out += "\\x" + hex(c, 2);
    else if (c < 0x10000) out += "\\u" + hex(c, 4);
    else out += "\\U" + hex(c, 8);
  }
  return out + '"';
}

// jsString answers s as a JavaScript string literal that is also JSON:
// JSON.stringify's, with every character outside printable ASCII as \uHHHH.
export function jsString(s) {
  return JSON.stringify(String(s)).replace(/[^\x20-\x7e]/g, (ch) => "\\u" + hex(ch.charCodeAt(0), 4));
}
