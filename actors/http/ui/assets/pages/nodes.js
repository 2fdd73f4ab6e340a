// The client nodes: status, scheduling eligibility, drain, capacity and
// how much of it the live allocations hold (bars), live through one
// blocking query on /v1/nodes with herder's `usage=true` (each node's
// allocated CPU and memory from the store's usage index: never one
// request per node, never the cluster's allocations). A filter box
// narrows the list in the browser; 100 rows are drawn at a time (pages).
import { watch, enc, sleep } from '../api.js';
import { h, replace, table, field, paged } from '../dom.js';
import { badge, shortId, mhz, mib } from '../format.js';
import { nodeCapacity, usageOfNodes, NODES_WITH_USAGE } from '../chart.js';

/** The least time between two reads of the list: on a busy cluster
 *  allocations change all the time, and each change wakes the query. */
export const NODES_EVERY_MS = 2000;
/** Rows drawn at once: a browser redrawing 10,000 rows of bars every
 *  2 s would be the slow part of the page. */
export const NODES_PER_PAGE = 100;

export async function render(main, _params, ctx) {
  const filter = h('input', { id: 'node-filter', type: 'search', placeholder: 'name, ID, datacenter or class' });
  const list = h('div', { id: 'node-list' }, h('p', null, 'Loading nodes…'));
  replace(main, h('h1', { tabindex: -1 }, 'Clients'),
    h('div', { class: 'toolbar' }, field('Filter', filter), h('div', { class: 'field' }, h('a', { href: '/ui/topology' }, 'Topology view'))),
    list);
  let nodes = null;
  let usage = null;
  let page = 0;
  const draw = () => {
    if (!nodes) return;
    const shown = matching(nodes, filter.value);
    const { rows, nav } = paged(shown, page, NODES_PER_PAGE, (n) => { page = n; draw(); });
    replace(list, nodeTable(rows, shown.length, nodes.length, usage), nav);
  };
  filter.addEventListener('input', () => { page = 0; draw(); });
  await watchNodes(ctx, (data) => {
    nodes = data;
    usage = usageOfNodes(data);
    draw();
  });
}

/** Keeps `onNodes` told of every node and what it holds, at most once
 *  every `NODES_EVERY_MS`. */
export function watchNodes(ctx, onNodes) {
  return watch(NODES_WITH_USAGE, async (data) => {
    onNodes(data);
    await sleep(NODES_EVERY_MS, ctx.signal);
  }, { signal: ctx.signal, onError: (e) => ctx.say(`Nodes: ${e.message}`) });
}

/** A bar of `used` against `total`, with the figure beside it. */
function useBar(label, used, total, show) {
  if (!total) return h('span', { class: 'empty' }, '—');
  const pct = Math.round((used / total) * 100);
  return h('span', { class: 'use' },
    h('meter', { min: 0, max: total, value: Math.min(used, total), low: total * 0.7, high: total * 0.9, optimum: 0, 'aria-label': `${label} ${pct}% allocated` }),
    `${pct}% of ${show(total)}`);
}

/** The nodes matching the filter box, by name. */
function matching(nodes, filterText) {
  const needle = filterText.trim().toLowerCase();
  return nodes
    .filter((n) => !needle || [n.Name, n.ID, n.Datacenter, n.NodeClass].some((v) => (v || '').toLowerCase().includes(needle)))
    .sort((a, b) => a.Name.localeCompare(b.Name) || a.ID.localeCompare(b.ID));
}

/** The table of one page of `rows`, of `matched` matching nodes of `total`. */
function nodeTable(rows, matched, total, usage) {
  return table({
    id: 'nodes',
    caption: `${matched} of ${total} nodes`,
    empty: total ? 'No node matches the filter.' : 'No client node has registered.',
    rows,
    rowAttrs: (n) => ({ 'data-node': n.ID }),
    columns: [
      ['Name', (n) => h('a', { href: `/ui/nodes/${enc(n.ID)}` }, n.Name || shortId(n.ID))],
      ['ID', (n) => h('span', { class: 'mono' }, shortId(n.ID))],
      ['Address', (n) => n.Address],
      ['Datacenter', (n) => n.Datacenter],
      ['Class', (n) => n.NodeClass || '—'],
      ['Status', (n) => badge(n.Status)],
      ['Eligibility', (n) => badge(n.SchedulingEligibility)],
      ['Drain', (n) => (n.Drain ? badge('draining') : 'no')],
      ['Allocs', (n) => (usage ? String(usage.get(n.ID)?.count || 0) : '…'), { num: true }],
      ['CPU allocated', (n) => (usage ? useBar('CPU', usage.get(n.ID)?.cpu || 0, nodeCapacity(n).cpu, mhz) : '…')],
      ['Memory allocated', (n) => (usage ? useBar('Memory', usage.get(n.ID)?.memory || 0, nodeCapacity(n).memory, mib) : '…')],
      ['Version', (n) => n.Version || '—'],
    ],
  });
}
