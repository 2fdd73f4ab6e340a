// The topology view, after Nomad's: each datacenter's client nodes as
// boxes whose width follows the node's memory, each filled by how much of
// its memory and CPU the live allocations hold. Live through the clients
// list's one throttled blocking query on /v1/nodes with herder's
// `usage=true` (each node's allocated resources from the store). Each box
// links to its node's page and is reachable by keyboard.
import { enc } from '../api.js';
import { h, replace } from '../dom.js';
import { mhz, mib, shortId } from '../format.js';
import { s, nodeCapacity, usageOfNodes } from '../chart.js';
import { watchNodes } from './nodes.js';

/** Layout units (the SVG scales to the page's width). */
const ROW = 1100;
const BOX_H = 54;
const GAP = 8;
const MIN_W = 70;
const MAX_W = 220;

export async function render(main, _params, ctx) {
  const totals = h('div', { id: 'topology-totals' });
  const view = h('div', { id: 'topology' }, h('p', null, 'Loading nodes…'));
  replace(main, h('h1', { tabindex: -1 }, 'Topology'),
    h('p', { class: 'legend' }, h('span', null, h('span', { class: 'swatch mem' }), 'memory allocated'),
      h('span', null, h('span', { class: 'swatch cpu' }), 'CPU allocated'),
      h('span', null, 'box width: the node\'s memory')),
    totals, view);
  let nodes = null;
  let usage = null;
  const draw = () => {
    if (!nodes) return;
    replace(totals, clusterTotals(nodes, usage));
    replace(view, datacenters(nodes, usage || new Map()));
  };
  await watchNodes(ctx, (data) => {
    nodes = data;
    usage = usageOfNodes(data);
    draw();
  });
}

function clusterTotals(nodes, usage) {
  let cpu = 0; let memory = 0; let usedCpu = 0; let usedMem = 0; let allocs = 0;
  for (const n of nodes) {
    const cap = nodeCapacity(n);
    cpu += cap.cpu; memory += cap.memory;
    const u = usage?.get(n.ID);
    if (u) { usedCpu += u.cpu; usedMem += u.memory; allocs += u.count; }
  }
  const pct = (a, b) => (b ? `${Math.round((a / b) * 100)}%` : '—');
  return h('dl', { class: 'meta' },
    [['Clients', String(nodes.length), 'topo-nodes'],
      ['Live allocations', usage ? String(allocs) : '…', 'topo-allocs'],
      ['Memory allocated', usage ? `${mib(usedMem)} of ${mib(memory)} (${pct(usedMem, memory)})` : '…', 'topo-memory'],
      ['CPU allocated', usage ? `${mhz(usedCpu)} of ${mhz(cpu)} (${pct(usedCpu, cpu)})` : '…', 'topo-cpu'],
    ].map(([t, v, id]) => h('div', null, h('dt', null, t), h('dd', { id }, v))));
}

function datacenters(nodes, usage) {
  if (!nodes.length) return h('p', { class: 'empty' }, 'No client node has registered.');
  const byDc = new Map();
  for (const n of nodes) {
    if (!byDc.has(n.Datacenter)) byDc.set(n.Datacenter, []);
    byDc.get(n.Datacenter).push(n);
  }
  const biggest = Math.max(1, ...nodes.map((n) => nodeCapacity(n).memory));
  return [...byDc.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([dc, list]) => {
    list.sort((a, b) => nodeCapacity(b).memory - nodeCapacity(a).memory || a.Name.localeCompare(b.Name));
    return h('section', { class: 'dc', 'data-dc': dc, 'aria-label': `Datacenter ${dc}` },
      h('h2', null, `Datacenter ${dc} `, h('span', { class: 'hint' }, `${list.length} nodes`)),
      dcSvg(list, usage, biggest));
  });
}

/** One datacenter's nodes packed left to right in rows. */
function dcSvg(list, usage, biggest) {
  let x = 0;
  let y = 0;
  const boxes = [];
  for (const n of list) {
    const cap = nodeCapacity(n);
    const w = Math.round(MIN_W + (MAX_W - MIN_W) * (cap.memory / biggest));
    if (x + w > ROW) { x = 0; y += BOX_H + GAP; }
    boxes.push(nodeBox(n, cap, usage.get(n.ID) || { cpu: 0, memory: 0, count: 0 }, x, y, w));
    x += w + GAP;
  }
  const height = y + BOX_H;
  return s('svg', { class: 'topology', viewBox: `0 0 ${ROW} ${height}`, width: ROW, height, role: 'group' }, boxes);
}

function nodeBox(n, cap, used, x, y, w) {
  const frac = (a, b) => (b ? Math.min(1, a / b) : 0);
  const inner = w - 12;
  const memPct = Math.round(frac(used.memory, cap.memory) * 100);
  const cpuPct = Math.round(frac(used.cpu, cap.cpu) * 100);
  const name = n.Name || shortId(n.ID);
  const label = `${name}: ${n.Status}, ${used.count} allocations, memory ${memPct}% of ${mib(cap.memory)}, CPU ${cpuPct}% of ${mhz(cap.cpu)}`;
  const shown = name.length > inner / 6.5 ? `${name.slice(0, Math.max(3, Math.floor(inner / 6.5) - 1))}…` : name;
  return s('a', { href: `/ui/nodes/${enc(n.ID)}`, class: `topo-node ${n.Status === 'ready' ? '' : 'down'}`.trim(),
    'data-node': n.ID, 'data-mem-pct': memPct, 'data-cpu-pct': cpuPct, 'aria-label': label },
  s('title', null, label),
  s('rect', { class: 'frame', x, y, width: w, height: BOX_H, rx: 4 }),
  s('text', { x: x + 6, y: y + 14 }, shown),
  s('rect', { class: 'track', x: x + 6, y: y + 20, width: inner, height: 12 }),
  s('rect', { class: 'mem', x: x + 6, y: y + 20, width: (inner * memPct) / 100, height: 12 }),
  s('rect', { class: 'track', x: x + 6, y: y + 36, width: inner, height: 12 }),
  s('rect', { class: 'cpu', x: x + 6, y: y + 36, width: (inner * cpuPct) / 100, height: 12 }));
}
