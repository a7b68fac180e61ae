// @ts-check
// The inference usage as the team page charts it (GET /api/v1/usage,
// grouped by day): tokens per day over the last days, every day present.
// Pure, for node --test (tests/usage.test.mjs).

/** @typedef {{start?: string, promptTokens: number, completionTokens: number, requests: number}} UsageItem */

const DAY = 86400e3;

/**
 * tokensByDay is the usage's items (grouped by day) as one entry per UTC
 * day of the last `days` days up to now's, oldest first; a day without
 * usage is 0.
 * @param {UsageItem[]} items
 * @param {number} days
 * @param {number} now
 * @returns {{day: string, prompt: number, completion: number, requests: number}[]}
 */
export function tokensByDay(items, days, now = Date.now()) {
  const today = Math.floor(now / DAY) * DAY;
  /** @type {Map<string, {day: string, prompt: number, completion: number, requests: number}>} */
  const byDay = new Map();
  for (let i = days - 1; i >= 0; i--) {
    const day = new Date(today - i * DAY).toISOString().slice(0, 10);
    byDay.set(day, { day, prompt: 0, completion: 0, requests: 0 });
  }
  for (const it of items) {
    if (!it.start) continue;
    const d = byDay.get(it.start.slice(0, 10));
    if (!d) continue; // outside the days shown
    d.prompt += it.promptTokens;
    d.completion += it.completionTokens;
    d.requests += it.requests;
  }
  return [...byDay.values()];
}

/**
 * usageFrom is the start of the first of the last `days` UTC days, as the
 * API's from.
 * @param {number} days
 * @param {number} now
 */
export function usageFrom(days, now = Date.now()) {
  return new Date(Math.floor(now / DAY) * DAY - (days - 1) * DAY).toISOString();
}

/**
 * csvHref is the link that downloads the usage as CSV: by day, key and
 * model, for team (the active team, or "*" for every team).
 * @param {string} team
 * @param {number} days
 * @param {number} now
 */
export function csvHref(team, days, now = Date.now()) {
  const q = new URLSearchParams({ format: "csv", groupBy: "day,key,model", from: usageFrom(days, now), team });
  return `/api/v1/usage?${q}`;
}

/**
 * compact writes a count short: 950, 12.3k, 4.5M.
 * @param {number} n
 */
export function compact(n) {
  if (n < 1000) return String(n);
  if (n < 1e6) return `${+(n / 1e3).toFixed(1)}k`;
  if (n < 1e9) return `${+(n / 1e6).toFixed(1)}M`;
  return `${+(n / 1e9).toFixed(1)}G`;
}
