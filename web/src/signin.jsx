import { useState } from "preact/hooks";
import { call } from "./api.js";
import { ErrorNotice } from "./ui.jsx";

// SignIn opens a browser session with a password or a personal access
// token (a full one: the API refuses bound or scoped tokens here).
export function SignIn({ error, onSignedIn }) {
  const [mode, setMode] = useState("password");
  const [err, setErr] = useState(error || "");
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    const f = new FormData(e.currentTarget);
    setBusy(true);
    setErr("");
    try {
      const body = mode === "password" ? { user: f.get("user"), password: f.get("password") } : { token: f.get("token") };
      await call("/session", { body });
      onSignedIn();
    } catch (e2) {
      setErr(e2.status === 429 ? e2.message : e2.status === 401 ? "Wrong user name, password or token." : e2.message);
    } finally {
      setBusy(false);
    }
  };
  return (
    <main id="main" class="center signin">
      <form onSubmit={submit} aria-labelledby="signin-title" class="card">
        <h1 id="signin-title">Sign in to CosmicAC</h1>
        <ErrorNotice error={err} />
        <fieldset class="switch">
          <legend class="sr">Sign in with</legend>
          <label><input type="radio" name="mode" checked={mode === "password"} onChange={() => setMode("password")} /> Password</label>
          <label><input type="radio" name="mode" checked={mode === "token"} onChange={() => setMode("token")} /> Access token</label>
        </fieldset>
        {mode === "password" ? (
          <>
            <label for="user">User name</label>
            <input id="user" name="user" autoComplete="username" required autoFocus />
            <label for="password">Password</label>
            <input id="password" name="password" type="password" autoComplete="current-password" required />
          </>
        ) : (
          <>
            <label for="token">Personal access token</label>
            <input id="token" name="token" type="password" autoComplete="off" required autoFocus aria-describedby="token-help" />
            <p id="token-help" class="help">A full token (<code>cosmicac tokens create</code>), not one bound to a team or scoped.</p>
          </>
        )}
        <button type="submit" class="primary" disabled={busy}>{busy ? "Signing in…" : "Sign in"}</button>
      </form>
    </main>
  );
}
