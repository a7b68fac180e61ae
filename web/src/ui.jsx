// Shared pieces of the interface: statuses as the jobs seed names them,
// notices, times, the confirmation dialog, tabs.
import { useEffect, useRef, useState } from "preact/hooks";
import { Link } from "./router.jsx";

// STATE_LABEL is each state as the interface and the CLI show it ("Active"
// for running, as in the jobs seed).
export const STATE_LABEL = {
  creating: "Creating",
  queued: "Queued",
  pending: "Pending",
  starting: "Starting",
  running: "Active",
  degraded: "Degraded",
  restarting: "Restarting",
  failed: "Failed",
  unknown: "Unknown",
  stopped: "Stopped",
  deleting: "Deleting",
};

export const STATES = Object.keys(STATE_LABEL);

export function StateBadge({ state }) {
  return <span class={`badge st-${state}`} data-state={state}>{STATE_LABEL[state] || state}</span>;
}

export function Notice({ kind = "info", children }) {
  return (
    <div class={`notice ${kind}`} role={kind === "error" ? "alert" : "status"}>
      {children}
    </div>
  );
}

export function ErrorNotice({ error }) {
  if (!error) return null;
  return <Notice kind="error">{typeof error === "string" ? error : error.message}</Notice>;
}

export function ago(t) {
  if (!t) return "";
  const s = Math.round((Date.now() - new Date(t).getTime()) / 1000);
  if (s < 5) return "just now";
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

export function Time({ t }) {
  if (!t) return <span>—</span>;
  const d = new Date(t);
  return <time dateTime={d.toISOString()} title={d.toLocaleString()}>{ago(t)}</time>;
}

// Confirm is a modal dialog (the platform's <dialog>, which keeps the
// focus inside and closes on Escape).
export function Confirm({ open, title, children, confirmLabel = "Confirm", danger, onConfirm, onCancel }) {
  const ref = useRef(null);
  useEffect(() => {
    const d = ref.current;
    if (!d) return;
    if (open && !d.open) d.showModal();
    if (!open && d.open) d.close();
  }, [open]);
  return (
    <dialog ref={ref} onClose={onCancel} aria-labelledby="confirm-title">
      <h2 id="confirm-title">{title}</h2>
      <div>{children}</div>
      <div class="actions">
        <button type="button" onClick={onCancel}>Cancel</button>
        <button type="button" class={danger ? "danger" : "primary"} onClick={onConfirm}>{confirmLabel}</button>
      </div>
    </dialog>
  );
}

// Tabs are links, so each tab has its own address.
export function Tabs({ base, tabs, current }) {
  return (
    <nav class="tabs" aria-label="Sections">
      {tabs.map(([id, label]) => (
        <Link href={id === tabs[0][0] ? base : `${base}/${id}`} current={id === current}>{label}</Link>
      ))}
    </nav>
  );
}

// Copy is a block of text with a button that copies it.
export function Copy({ text, label }) {
  const [done, setDone] = useState(false);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(text);
      setDone(true);
      setTimeout(() => setDone(false), 1500);
    } catch {
      // no clipboard (plain HTTP on another host): the text is selectable
    }
  };
  return (
    <div class="copy">
      <pre tabIndex={0} aria-label={label}><code>{text}</code></pre>
      <button type="button" class="ghost" onClick={copy}>{done ? "Copied" : "Copy"}</button>
    </div>
  );
}

export function useAsync(fn, deps) {
  const [state, setState] = useState({ loading: true });
  const reload = async () => {
    try {
      setState((s) => ({ ...s, loading: true }));
      setState({ value: await fn(), loading: false });
    } catch (error) {
      setState({ error, loading: false });
    }
  };
  useEffect(() => {
    reload();
  }, deps);
  return [state, reload];
}
