// A small history router: paths are the interface's pages, served as
// index.html by the gateway for every path outside the APIs.
import { useEffect, useState } from "preact/hooks";

const listeners = new Set();

export function navigate(href, replace = false) {
  if (replace) history.replaceState(null, "", href);
  else history.pushState(null, "", href);
  for (const l of listeners) l();
  window.scrollTo(0, 0);
}

window.addEventListener("popstate", () => {
  for (const l of listeners) l();
});

export function usePath() {
  const [path, setPath] = useState(location.pathname);
  useEffect(() => {
    const l = () => setPath(location.pathname);
    listeners.add(l);
    return () => listeners.delete(l);
  }, []);
  return path;
}

export function useQuery() {
  usePath();
  return new URLSearchParams(location.search);
}

export function Link({ href, current, children, ...rest }) {
  const onClick = (e) => {
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    navigate(href);
  };
  return (
    <a href={href} onClick={onClick} aria-current={current ? "page" : undefined} {...rest}>
      {children}
    </a>
  );
}
