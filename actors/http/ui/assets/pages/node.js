// One client node: its facts, the resources its live allocations take,
// drain (with a deadline) and eligibility controls, its allocations kept
// live by one blocking query on the node's allocations (each change also
// re-reads the node), its events and attributes.
import { get, put, watch, enc } from '../api.js';
import { h, replace, table, facts, field } from '../dom.js';
import { badge, shortId, time, mhz, mib, parseDuration } from '../format.js';
import { allocTable } from './job.js';

const LIVE = new Set(['pending', 'running']);

export async function render(main, [id], ctx) {
  const header = h('div');
  const controls = h('section', { 'aria-labelledby': 'controls-title' });
  const usage = h('section', { 'aria-labelledby': 'usage-title' });
  const allocs = h('section', { 'aria-labelledby': 'allocs-title' });
  const details = h('section');
  const title = h('h1', { tabindex: -1 }, `Client ${shortId(id)}`);
  replace(main, title, header, controls, usage, allocs, details);
  let list = [];
  const refresh = async () => {
    const node = await get(`/v1/node/${enc(id)}`, { signal: ctx.signal });
    title.textContent = `Client ${node.Name || shortId(node.ID)}`;
    replace(header, nodeFacts(node));
    replace(controls, h('h2', { id: 'controls-title' }, 'Scheduling'), nodeControls(node, ctx, refresh));
    replace(usage, h('h2', { id: 'usage-title' }, 'Resources allocated'), usageBars(node, list));
    replace(details, nodeDetails(node));
  };
  await watch(`/v1/node/${enc(id)}/allocations`, async (data) => {
    list = data;
    replace(allocs, h('h2', { id: 'allocs-title' }, 'Allocations'), allocTable(list, { showJob: true }));
    await refresh();
  }, {
    signal: ctx.signal,
    onError: (e) => ctx.say(`Node: ${e.message}`),
    // The node itself (status, drain done) changes without its
    // allocations: re-read it when a shorter wait runs out.
    wait: '10s',
    onIdle: refresh,
  });
}

function nodeFacts(node) {
  return facts([
    ['Status', h('span', { id: 'node-status' }, badge(node.Status))],
    ['Eligibility', h('span', { id: 'node-eligibility' }, badge(node.SchedulingEligibility))],
    ['Drain', h('span', { id: 'node-drain' }, node.Drain ? badge('draining') : 'no')],
    ['Address', node.HTTPAddr || node.Attributes?.['unique.network.ip-address'] || '—'],
    ['Datacenter', node.Datacenter],
    ['Class', node.NodeClass || '—'],
    ['ID', h('span', { class: 'mono' }, node.ID)],
  ]);
}

function nodeControls(node, ctx, refresh) {
  const act = (label, work) => async () => {
    try {
      await work();
      ctx.say(`${label}: done.`, true);
      await refresh();
    } catch (e) {
      ctx.say(`${label}: ${e.message}`);
    }
  };
  const eligible = node.SchedulingEligibility === 'eligible';
  const eligibility = h('button', { type: 'button', id: 'toggle-eligibility', onclick: act('Eligibility', () =>
    put(`/v1/node/${enc(node.ID)}/eligibility`, { NodeID: node.ID, Eligibility: eligible ? 'ineligible' : 'eligible' })) },
  eligible ? 'Mark ineligible' : 'Mark eligible');
  if (node.Drain) {
    const deadline = node.DrainStrategy?.ForceDeadline;
    return h('div', { class: 'actions' },
      h('span', null, `Draining${deadline && !deadline.startsWith('0001') ? `; forced at ${time(deadline)}` : ''}.`),
      h('button', { type: 'button', id: 'stop-drain', onclick: act('Stop drain', () =>
        put(`/v1/node/${enc(node.ID)}/drain`, { NodeID: node.ID, DrainSpec: null, MarkEligible: true })) }, 'Stop drain'),
      eligibility);
  }
  const deadline = h('input', { id: 'drain-deadline', value: '1h', size: 8, 'aria-describedby': 'drain-hint' });
  const ignoreSystem = h('input', { id: 'drain-ignore-system', type: 'checkbox' });
  const form = h('form', { id: 'drain-form', class: 'toolbar' },
    field('Drain deadline', deadline),
    h('div', { class: 'field' }, h('label', { for: 'drain-ignore-system' }, 'Ignore system jobs'), ignoreSystem),
    h('div', { class: 'field' }, h('button', { type: 'submit', class: 'danger' }, 'Drain node')),
    h('div', { class: 'field' }, eligibility),
    h('p', { id: 'drain-hint', class: 'hint' }, 'Like 30m or 1h; after it, remaining allocations are stopped. 0s stops them at once.'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const ns = parseDuration(deadline.value);
    if (ns === null) {
      ctx.say(`Drain deadline: "${deadline.value}" is not a duration like 30m or 1h.`);
      deadline.focus();
      return;
    }
    act('Drain', () => put(`/v1/node/${enc(node.ID)}/drain`, {
      NodeID: node.ID,
      DrainSpec: { Deadline: ns, IgnoreSystemJobs: ignoreSystem.checked },
      MarkEligible: false,
    }))();
  });
  return form;
}

/** CPU and memory of the live allocations against the node's capacity. */
function usageBars(node, allocs) {
  const live = allocs.filter((a) => a.DesiredStatus === 'run' && LIVE.has(a.ClientStatus));
  let cpu = 0;
  let memory = 0;
  for (const a of live) {
    for (const task of Object.values(a.AllocatedResources?.Tasks || {})) {
      cpu += task.Cpu?.CpuShares || 0;
      memory += task.Memory?.MemoryMB || 0;
    }
  }
  const bar = (id, label, used, total, unit) => h('div', { class: 'bar' },
    h('label', { for: id }, label),
    h('meter', { id, min: 0, max: total || 1, value: used, high: (total || 1) * 0.9 }),
    h('span', null, `${unit(used)} of ${unit(total)}`));
  return [
    bar('cpu-use', 'CPU', cpu, node.NodeResources?.Cpu?.CpuShares || 0, mhz),
    bar('memory-use', 'Memory', memory, node.NodeResources?.Memory?.MemoryMB || 0, mib),
    h('p', { class: 'hint' }, `${live.length} live allocations.`),
  ];
}

function nodeDetails(node) {
  const pairs = (obj) => Object.entries(obj || {}).sort(([a], [b]) => a.localeCompare(b));
  return [
    h('h2', null, 'Events'),
    table({
      id: 'node-events',
      rows: [...(node.Events || [])].reverse(),
      columns: [
        ['Time', (e) => time(e.Timestamp)],
        ['Subsystem', (e) => e.Subsystem],
        ['Message', (e) => e.Message],
      ],
    }),
    h('details', null, h('summary', null, 'Attributes'), table({
      id: 'node-attributes',
      rows: pairs(node.Attributes),
      columns: [['Name', ([k]) => h('span', { class: 'mono' }, k)], ['Value', ([, v]) => v]],
    })),
    h('details', null, h('summary', null, 'Meta'), table({
      rows: pairs(node.Meta),
      columns: [['Name', ([k]) => h('span', { class: 'mono' }, k)], ['Value', ([, v]) => v]],
    })),
  ];
}
