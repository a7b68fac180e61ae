// CosmicAC's web interface (app-ui): a single page served by the gateway
// for every path outside /api, /inference and /monitor, speaking only the
// platform's public HTTP API (docs/webui.md).
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { call, setCSRF, setTeam } from "./api.js";
import { SignIn } from "./signin.jsx";
import { JobsPage } from "./jobs.jsx";
import { NewJobPage } from "./newjob.jsx";
import { JobPage } from "./job.jsx";
import { RacksPage } from "./racks.jsx";
import { TeamPage } from "./team.jsx";
import { Link, navigate, usePath } from "./router.jsx";
import { Notice } from "./ui.jsx";

const TEAM_KEY = "cosmicac.team";
const THEME_KEY = "cosmicac.theme";

const darkQuery = window.matchMedia("(prefers-color-scheme: dark)");

// applyTheme sets the page's theme: the user's choice, or on "auto" the
// system's preference (followed as it changes).
function applyTheme(theme) {
  const set = () => {
    document.documentElement.dataset.theme = theme === "light" || theme === "dark" ? theme : darkQuery.matches ? "dark" : "light";
  };
  set();
  darkQuery.onchange = theme === "light" || theme === "dark" ? null : set;
}

function App() {
  const path = usePath();
  const [me, setMe] = useState(undefined); // undefined: asking; null: signed out
  const [error, setError] = useState("");
  const [theme, setThemeState] = useState(localStorage.getItem(THEME_KEY) || "auto");

  useEffect(() => applyTheme(theme), [theme]);

  const load = async (team) => {
    try {
      setTeam(team);
      const w = await call("/whoami");
      setCSRF(w.csrfToken);
      if (!w.team && w.teams && w.teams.length) {
        // The saved team is gone: the first team the user is in.
        return load(w.teams[0].team);
      }
      setTeam(w.team);
      if (w.team) localStorage.setItem(TEAM_KEY, w.team);
      // The teams to switch to: one's own, or every team for a platform
      // admin (listTeams answers what the caller may act in).
      try {
        w.switchable = (await call("/teams")).items.map((t) => ({ team: t.name, role: t.role || "platform admin" }));
      } catch {
        w.switchable = w.teams || [];
      }
      setMe(w);
    } catch (e) {
      if (e.status === 401) {
        setMe(null);
        return;
      }
      if (e.status === 403 && team) {
        // Not (or no longer) a member of the saved team.
        localStorage.removeItem(TEAM_KEY);
        return load("");
      }
      setError(e.message);
      setMe(null);
    }
  };

  useEffect(() => {
    load(localStorage.getItem(TEAM_KEY) || "");
  }, []);

  if (me === undefined) return <main class="center" aria-busy="true"><p>Loading…</p></main>;
  if (me === null) {
    return <SignIn error={error} onSignedIn={() => { setError(""); load(localStorage.getItem(TEAM_KEY) || ""); }} />;
  }

  const signOut = async () => {
    try {
      await call("/session", { method: "DELETE" });
    } catch {
      // signed out already
    }
    setCSRF("");
    setMe(null);
    navigate("/");
  };
  const switchTeam = (team) => {
    localStorage.setItem(TEAM_KEY, team);
    load(team);
  };
  const cycleTheme = () => {
    const next = theme === "auto" ? "dark" : theme === "dark" ? "light" : "auto";
    localStorage.setItem(THEME_KEY, next);
    setThemeState(next);
  };

  return (
    <>
      <a class="skip" href="#main">Skip to content</a>
      <header class="top">
        <Link href="/" class="brand">CosmicAC</Link>
        <nav aria-label="Main">
          <Link href="/jobs" current={path === "/" || path.startsWith("/jobs") && path !== "/jobs/new"}>Jobs</Link>
          {can(me, "jobs.create") && <Link href="/jobs/new" current={path === "/jobs/new"}>New job</Link>}
          {can(me, "racks.manage") ? (
            <Link href="/racks" current={path.startsWith("/racks")}>Racks</Link>
          ) : (
            can(me, "jobs.read") && <Link href="/racks" current={path.startsWith("/racks")}>Locations</Link>
          )}
          <Link href="/team" current={path.startsWith("/team")}>Team</Link>
        </nav>
        <div class="who">
          <label class="team-switch">
            <span class="sr">Active team</span>
            <select value={me.team} onChange={(e) => switchTeam(e.currentTarget.value)} aria-label="Active team">
              {(me.switchable || me.teams || []).map((m) => <option value={m.team}>{m.team} ({m.role})</option>)}
            </select>
          </label>
          <span class="user" title={me.credential === "session" ? "signed in" : "token"}>{me.user}</span>
          <button type="button" class="ghost" onClick={cycleTheme} aria-label={`Theme: ${theme}`} title={`Theme: ${theme}`}>
            {theme === "dark" ? "☾" : theme === "light" ? "☀" : "◐"}
          </button>
          <button type="button" class="ghost" onClick={signOut}>Sign out</button>
        </div>
      </header>
      <main id="main" tabIndex={-1}>
        {error && <Notice kind="error">{error}</Notice>}
        <Page path={path} me={me} />
      </main>
    </>
  );
}

// can says whether the signed-in credential holds a permission
// (docs/permissions.md) in the active team, as whoami lists them: the
// interface hides what the API would refuse; the API decides.
export function can(me, perm) {
  return !!(me && me.permissions && me.permissions.includes(perm));
}

function Page({ path, me }) {
  if (path === "/" || path === "/jobs") return <JobsPage me={me} />;
  if (path === "/jobs/new") return <NewJobPage me={me} />;
  const job = path.match(/^\/jobs\/([0-9a-f-]{36})(?:\/(\w+))?$/);
  if (job) return <JobPage me={me} id={job[1]} tab={job[2] || "overview"} />;
  if (path === "/racks") return <RacksPage me={me} />;
  const team = path.match(/^\/team(?:\/(\w[\w-]*))?$/);
  if (team) return <TeamPage me={me} tab={team[1] || "members"} />;
  return (
    <section>
      <h1>Not found</h1>
      <p>There is no page at {path}. <Link href="/jobs">Go to the jobs</Link>.</p>
    </section>
  );
}

render(<App />, document.getElementById("app"));
