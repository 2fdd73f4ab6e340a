// Small charts drawn as inline SVG by our own code (no library, no
// inline style: colours come from style.css classes): a line chart of
// samples over time, and the node usage helpers the clients list and the
// topology view share.
const SVG = 'http://www.w3.org/2000/svg';

/** An SVG element with attributes and children. */
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) el.setAttribute(k, String(v));
  for (const child of children.flat()) if (child !== null && child !== undefined) el.append(child);
  return el;
}

/**
 * A line chart of `points` ([time ms, value]) scaled to `max` (or the
 * largest value), with the latest value as its heading. The SVG is an
 * image whose label says the same as the heading, for screen readers.
 */
export function lineChart({ title, points, max, format }) {
  const W = 360;
  const H = 120;
  const last = points.length ? points[points.length - 1][1] : 0;
  const top = Math.max(max || 0, ...points.map(([, v]) => v), 1);
  const t0 = points.length ? points[0][0] : 0;
  const span = Math.max(1, (points.length ? points[points.length - 1][0] : 1) - t0);
  const x = (t) => (points.length < 2 ? W : ((t - t0) / span) * W);
  const y = (v) => H - (v / top) * (H - 4);
  const line = points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(' ');
  const label = `${title}: ${format(last)} now${max ? ` of ${format(max)} allocated` : ''}; ${points.length} samples`;
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img', 'aria-label': label, class: 'line-chart' },
    s('rect', { x: 0, y: 0, width: W, height: H, class: 'chart-bg' }),
    max ? s('line', { x1: 0, x2: W, y1: y(max), y2: y(max), class: 'chart-limit' }) : null,
    points.length > 1
      ? s('polygon', { points: `0,${H} ${line} ${W},${H}`, class: 'chart-area' })
      : null,
    points.length > 1 ? s('polyline', { points: line, class: 'chart-line' }) : null);
  const figure = document.createElement('figure');
  const caption = document.createElement('figcaption');
  caption.textContent = `${title}: ${format(last)}${max ? ` of ${format(max)}` : ''}`;
  caption.className = 'chart-value';
  figure.append(caption, svg);
  return figure;
}

/** CPU (MHz) and memory (MiB) a node offers to allocations: its
 *  resources less what it reserves. */
export function nodeCapacity(node) {
  const r = node.NodeResources || {};
  const reserved = node.ReservedResources || {};
  return {
    cpu: Math.max(0, (r.Cpu?.CpuShares || 0) - (reserved.Cpu?.CpuShares || 0)),
    memory: Math.max(0, (r.Memory?.MemoryMB || 0) - (reserved.Memory?.MemoryMB || 0)),
  };
}

/** What each node's live allocations hold, by node ID, from the node
 *  list's `Allocated` (herder's `/v1/nodes?usage=true`: the store's
 *  per-node usage, so a view of 10,000 nodes never reads their
 *  allocations). */
export function usageOfNodes(nodes) {
  const byNode = new Map();
  for (const n of nodes || []) {
    const a = n.Allocated || {};
    byNode.set(n.ID, { cpu: a.CpuShares || 0, memory: a.MemoryMB || 0, count: a.Allocations || 0 });
  }
  return byNode;
}

/** The one read both node views make: every node with its resources and
 *  what its allocations hold. */
export const NODES_WITH_USAGE = '/v1/nodes?resources=true&usage=true';
