// How values read on screen: times, sizes, IDs, statuses.
import { h } from './dom.js';

/** The first 8 characters of an ID, as Nomad shows them. */
export const shortId = (id) => (id || '').slice(0, 8);

/** A Unix time in nanoseconds, or an RFC 3339 string, as a local time. */
export function time(value) {
  if (!value) return '—';
  const date = typeof value === 'number' ? new Date(value / 1e6) : new Date(value);
  if (Number.isNaN(date.getTime()) || date.getFullYear() < 1971) return '—';
  return date.toLocaleString();
}

/** How long ago, for "modified" columns. */
export function ago(value) {
  if (!value) return '—';
  const ms = typeof value === 'number' ? value / 1e6 : Date.parse(value);
  const seconds = Math.round((Date.now() - ms) / 1000);
  if (!Number.isFinite(seconds) || seconds < 0) return 'just now';
  if (seconds < 60) return `${seconds}s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)}h ago`;
  return `${Math.floor(seconds / 86400)}d ago`;
}

export const mib = (n) => (n >= 1024 ? `${(n / 1024).toFixed(1)} GiB` : `${n} MiB`);
export const mhz = (n) => (n >= 1000 ? `${(n / 1000).toFixed(1)} GHz` : `${n} MHz`);

const GOOD = new Set(['running', 'ready', 'eligible', 'alive', 'complete', 'successful', 'started', 'healthy', 'leader']);
const BAD = new Set(['failed', 'lost', 'down', 'dead', 'ineligible', 'stopped', 'cancelled', 'blocked', 'unhealthy']);
const WARN = new Set(['pending', 'starting', 'queued', 'initializing', 'draining', 'paused', 'pausing', 'disconnected', 'unknown', 'resuming', 'stopping']);

/** A status word as a badge (coloured by `status`, showing `label` or
 *  the word itself); colour and text say the same thing. */
export function badge(status, label) {
  const word = String(status || 'unknown');
  const key = word.toLowerCase();
  const cls = GOOD.has(key) ? 'ok' : BAD.has(key) ? 'bad' : WARN.has(key) ? 'warn' : '';
  return h('span', { class: `badge ${cls}`.trim() }, label ?? word);
}

/** The non-zero counts of a job summary's group entry, as badges. */
export function summaryCounts(summary) {
  const order = ['Queued', 'Starting', 'Running', 'Complete', 'Failed', 'Lost', 'Unknown'];
  const parts = order.filter((k) => summary[k] > 0).map((k) => badge(k, `${summary[k]} ${k.toLowerCase()}`));
  return parts.length ? h('span', { class: 'counts' }, parts) : h('span', { class: 'empty' }, 'no allocations');
}

/** Adds up the group entries of a job summary. */
export function totalSummary(jobSummary) {
  const total = {};
  for (const group of Object.values(jobSummary?.Summary || {})) {
    for (const [k, v] of Object.entries(group)) total[k] = (total[k] || 0) + v;
  }
  return total;
}

/** "1h30m", "90s", "2h" as nanoseconds; null when unreadable. */
export function parseDuration(text) {
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h)/g;
  const units = { ms: 1e6, s: 1e9, m: 60e9, h: 3600e9 };
  let total = 0;
  let consumed = '';
  for (const m of text.trim().matchAll(re)) {
    total += Number(m[1]) * units[m[2]];
    consumed += m[0];
  }
  return consumed && consumed === text.trim() ? Math.round(total) : null;
}

/** A byte count as B, KiB, MiB or GiB. */
export function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = Number(n) || 0;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return unit ? `${value.toFixed(1)} ${units[unit]}` : `${value} B`;
}
