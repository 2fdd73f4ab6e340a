// The client nodes: status, scheduling eligibility, drain and capacity,
// live through one blocking query on /v1/nodes; a filter box narrows the
// list in the browser.
import { watch, enc } from '../api.js';
import { h, replace, table, field } from '../dom.js';
import { badge, shortId, mhz, mib } from '../format.js';

export async function render(main, _params, ctx) {
  const filter = h('input', { id: 'node-filter', type: 'search', placeholder: 'name, ID, datacenter or class' });
  const list = h('div', { id: 'node-list' }, h('p', null, 'Loading nodes…'));
  replace(main, h('h1', { tabindex: -1 }, 'Clients'), h('div', { class: 'toolbar' }, field('Filter', filter)), list);
  let nodes = null;
  const draw = () => nodes && replace(list, nodeTable(nodes, filter.value));
  filter.addEventListener('input', draw);
  await watch('/v1/nodes?resources=true', (data) => {
    nodes = data;
    draw();
  }, { signal: ctx.signal, onError: (e) => ctx.say(`Nodes: ${e.message}`) });
}

function nodeTable(nodes, filterText) {
  const needle = filterText.trim().toLowerCase();
  const shown = nodes
    .filter((n) => !needle || [n.Name, n.ID, n.Datacenter, n.NodeClass].some((v) => (v || '').toLowerCase().includes(needle)))
    .sort((a, b) => a.Name.localeCompare(b.Name) || a.ID.localeCompare(b.ID));
  return table({
    id: 'nodes',
    caption: `${shown.length} of ${nodes.length} nodes`,
    empty: nodes.length ? 'No node matches the filter.' : 'No client node has registered.',
    rows: shown,
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
      ['CPU', (n) => mhz(n.NodeResources?.Cpu?.CpuShares || 0), { num: true }],
      ['Memory', (n) => mib(n.NodeResources?.Memory?.MemoryMB || 0), { num: true }],
      ['Version', (n) => n.Version || '—'],
    ],
  });
}
