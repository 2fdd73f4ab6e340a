// The servers and their scheduling workers: the members and Raft peers
// (leader marked), and this agent's worker pool (each worker's status and
// workload; pause and resume; num_schedulers and the enabled schedulers).
// These answers are not in the state store, so no blocking query exists
// for them: the page re-reads them every 2 s, one read at a time.
import { get, put, sleep } from '../api.js';
import { h, replace, table, field } from '../dom.js';
import { badge, shortId, time } from '../format.js';

const EVERY_MS = 2000;
const SCHEDULERS = ['service', 'batch', 'system', 'sysbatch', '_core'];

export async function render(main, _params, ctx) {
  const members = h('section', { 'aria-labelledby': 'members-title' });
  const raft = h('section', { 'aria-labelledby': 'raft-title' });
  const workers = h('section', { 'aria-labelledby': 'workers-title' });
  const config = h('section', { 'aria-labelledby': 'config-title' });
  replace(main, h('h1', { tabindex: -1 }, 'Servers'), members, raft, workers, config);
  let configShown = false;
  const refresh = async () => {
    const [m, r, w] = await Promise.all([
      get('/v1/agent/members', { signal: ctx.signal }).catch((e) => ({ error: e })),
      get('/v1/operator/raft/configuration', { signal: ctx.signal }).catch((e) => ({ error: e })),
      get('/v1/agent/schedulers', { signal: ctx.signal }).catch((e) => ({ error: e })),
    ]);
    replace(members, h('h2', { id: 'members-title' }, 'Members'), m.error ? failed(m.error) : memberTable(m));
    replace(raft, h('h2', { id: 'raft-title' }, 'Raft peers'), r.error ? failed(r.error) : raftTable(r));
    replace(workers, h('h2', { id: 'workers-title' }, 'Scheduling workers'), w.error ? failed(w.error) : workerPanel(w, ctx, refresh));
    // The form is drawn once, so a refresh never overwrites what is typed.
    if (!configShown && !w.error) {
      configShown = true;
      const current = await get('/v1/agent/schedulers/config', { signal: ctx.signal });
      replace(config, h('h2', { id: 'config-title' }, 'Worker pool'), configForm(current, ctx, refresh));
    }
  };
  while (!ctx.signal.aborted) {
    try {
      await refresh();
    } catch (e) {
      if (!ctx.signal.aborted) ctx.say(`Servers: ${e.message}`);
    }
    await sleep(EVERY_MS, ctx.signal);
  }
}

const failed = (e) => h('p', { class: 'notice' }, e.message);

function memberTable(answer) {
  return table({
    id: 'members',
    rows: answer.Members || [],
    columns: [
      ['Name', (m) => m.Name],
      ['Address', (m) => `${m.Addr}:${m.Port}`],
      ['Status', (m) => badge(m.Status)],
      ['Datacenter', (m) => m.Tags?.dc || '—'],
      ['Region', (m) => m.Tags?.region || '—'],
      ['Version', (m) => m.Tags?.build || '—'],
    ],
  });
}

function raftTable(answer) {
  return table({
    id: 'raft-peers',
    rows: answer.Servers || [],
    columns: [
      ['Node', (s) => s.Node],
      ['ID', (s) => h('span', { class: 'mono' }, s.ID)],
      ['Address', (s) => s.Address],
      ['Role', (s) => (s.Leader ? badge('leader') : 'follower')],
      ['Voter', (s) => (s.Voter ? 'yes' : 'no')],
    ],
  });
}

function workerPanel(answer, ctx, refresh) {
  const list = answer.schedulers || [];
  const paused = list.length > 0 && list.every((w) => ['Paused', 'Pausing'].includes(w.status));
  const act = (label, path) => async () => {
    try {
      await put(path, {});
      ctx.say(`${label}: done.`, true);
      await refresh();
    } catch (e) {
      ctx.say(`${label}: ${e.message}`);
    }
  };
  return [
    h('p', null, `Workers of ${answer.server_id} (this agent). Paused workers finish the evaluation in hand and take no more; evaluations wait in the broker.`),
    h('div', { class: 'actions' },
      paused
        ? h('button', { type: 'button', class: 'primary', onclick: act('Resume workers', '/v1/agent/schedulers/resume') }, 'Resume workers')
        : h('button', { type: 'button', class: 'danger', onclick: act('Pause workers', '/v1/agent/schedulers/pause') }, 'Pause workers')),
    table({
      id: 'workers',
      rows: list,
      rowAttrs: (w) => ({ 'data-worker': w.id, 'data-status': w.status }),
      columns: [
        ['Worker', (w) => h('span', { class: 'mono' }, shortId(w.id))],
        ['Status', (w) => badge(w.status)],
        ['Workload', (w) => w.workload_status],
        ['Schedulers', (w) => (w.enabled_schedulers || []).join(', ')],
        ['Started', (w) => time(w.started)],
      ],
    }),
  ];
}

function configForm(current, ctx, refresh) {
  const count = h('input', { id: 'num-schedulers', type: 'number', min: 0, value: current.num_schedulers, size: 4 });
  const boxes = SCHEDULERS.map((name) => h('label', { class: 'inline' },
    h('input', { type: 'checkbox', name: 'scheduler', value: name, checked: current.enabled_schedulers.includes(name), disabled: name === '_core' }),
    name));
  const form = h('form', { id: 'worker-config', class: 'toolbar' },
    field('Number of workers', count),
    h('fieldset', null, h('legend', null, 'Enabled schedulers'), h('div', { class: 'inline' }, boxes)),
    h('div', { class: 'field' }, h('button', { type: 'submit' }, 'Apply')));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const enabled = [...form.querySelectorAll('input[name=scheduler]')].filter((b) => b.checked).map((b) => b.value);
    try {
      const now = await put('/v1/agent/schedulers/config', { num_schedulers: Number(count.value), enabled_schedulers: enabled });
      ctx.say(`Worker pool: ${now.num_schedulers} workers serving ${now.enabled_schedulers.join(', ')}.`, true);
      await refresh();
    } catch (err) {
      ctx.say(`Worker pool: ${err.message}`);
    }
  });
  return form;
}
