// One job: its facts, task groups with counts and resources, the
// allocations table kept live by one blocking query on the job's
// allocations (each change, and each 10 s wait that ends quiet, also
// re-reads the job, its summary and evaluations), its
// versions with what changed, its evaluations with why a placement
// failed (which constraint filtered how many nodes, what was exhausted),
// and stop/start.
import { get, put, del, watch, enc } from '../api.js';
import { h, replace, table, facts, confirmButton } from '../dom.js';
import { badge, summaryCounts, shortId, ago, time, mhz, mib } from '../format.js';

export async function render(main, [namespace, id], ctx) {
  const q = `namespace=${enc(namespace)}`;
  const base = `/v1/job/${enc(id)}`;
  const header = h('div');
  const groups = h('section', { 'aria-labelledby': 'groups-title' });
  const allocs = h('section', { 'aria-labelledby': 'allocs-title' });
  const versions = h('section', { 'aria-labelledby': 'versions-title' });
  const evals = h('section', { 'aria-labelledby': 'evals-title' });
  replace(main, h('h1', { tabindex: -1 }, id), header, groups, allocs, evals, versions);
  let shownVersion = null;

  const refreshJob = async () => {
    const [job, summary, evaluations] = await Promise.all([
      get(`${base}?${q}`, { signal: ctx.signal }),
      get(`${base}/summary?${q}`, { signal: ctx.signal }),
      get(`${base}/evaluations?${q}`, { signal: ctx.signal }),
    ]);
    replace(evals, h('h2', { id: 'evals-title' }, 'Evaluations'), evalTable(evaluations));
    replace(header, jobHeader(job, { base, q, ctx, refresh: refreshJob }));
    replace(groups, h('h2', { id: 'groups-title' }, 'Task groups'), groupTable(job, summary));
    if (job.Version !== shownVersion) {
      shownVersion = job.Version;
      const answer = await get(`${base}/versions?${q}&diffs=true`, { signal: ctx.signal });
      replace(versions, h('h2', { id: 'versions-title' }, 'Versions'), versionTable(answer));
    }
  };
  await watch(`${base}/allocations?${q}`, async (list) => {
    replace(allocs, h('h2', { id: 'allocs-title' }, 'Allocations'), allocTable(list));
    await refreshJob();
  }, {
    signal: ctx.signal,
    onError: (e) => ctx.say(`Job ${id}: ${e.message}`),
    // The job, its summary and evaluations change without its allocations
    // (a blocked evaluation, a stop): re-read them when a shorter wait ends.
    wait: '10s',
    onIdle: refreshJob,
  });
}

function jobHeader(job, { base, q, ctx, refresh }) {
  const act = (work) => async () => {
    try {
      await work();
      ctx.say(`Job ${job.ID} updated.`, true);
      await refresh();
    } catch (e) {
      ctx.say(e.message);
    }
  };
  const stop = confirmButton('Stop job', 'Yes, stop job', act(() => del(`${base}?${q}`)));
  const start = h('button', { type: 'button', class: 'primary', onclick: act(async () => {
    const current = await get(`${base}?${q}`);
    current.Stop = false;
    await put(`${base}?${q}`, { Job: current });
  }) }, 'Start job');
  return [
    facts([
      ['Status', h('span', { id: 'job-status' }, badge(job.Stop ? 'stopped' : job.Status))],
      ['Type', job.Type],
      ['Namespace', job.Namespace],
      ['Priority', String(job.Priority)],
      ['Version', String(job.Version)],
      ['Datacenters', (job.Datacenters || []).join(', ')],
      ['Submitted', time(job.SubmitTime)],
    ]),
    h('div', { class: 'actions' }, job.Stop ? start : stop),
  ];
}

function groupTable(job, summary) {
  const counts = summary?.Summary || {};
  return table({
    id: 'groups',
    rows: job.TaskGroups || [],
    rowAttrs: (g) => ({ 'data-group': g.Name }),
    columns: [
      ['Group', (g) => g.Name],
      ['Count', (g) => String(g.Count), { num: true }],
      ['Allocations', (g) => summaryCounts(counts[g.Name] || {})],
      ['Tasks', (g) => (g.Tasks || []).map((t) => `${t.Name} (${t.Driver})`).join(', ')],
      ['CPU', (g) => mhz(sum(g, (r) => r.CPU)), { num: true }],
      ['Memory', (g) => mib(sum(g, (r) => r.MemoryMB)), { num: true }],
    ],
  });
}

/** A group's tasks' resources added up (one allocation's worth). */
const sum = (group, pick) => (group.Tasks || []).reduce((n, t) => n + (pick(t.Resources || {}) || 0), 0);

export function allocTable(list, { showJob = false } = {}) {
  const rows = [...list].sort((a, b) => b.CreateIndex - a.CreateIndex || a.Name.localeCompare(b.Name));
  return table({
    id: 'allocations',
    caption: `${rows.length} allocations`,
    empty: 'No allocations.',
    rows,
    rowAttrs: (a) => ({ 'data-alloc': a.ID, 'data-status': a.ClientStatus, 'data-node': a.NodeID }),
    columns: [
      ['ID', (a) => h('a', { href: `/ui/allocations/${enc(a.ID)}`, class: 'mono' }, shortId(a.ID))],
      ...(showJob ? [['Job', (a) => h('a', { href: `/ui/jobs/${enc(a.Namespace)}/${enc(a.JobID)}` }, a.JobID)]] : []),
      ['Name', (a) => a.Name],
      ['Node', (a) => (a.NodeID ? h('a', { href: `/ui/nodes/${enc(a.NodeID)}` }, a.NodeName || shortId(a.NodeID)) : '—')],
      ['Status', (a) => badge(a.ClientStatus)],
      ['Desired', (a) => a.DesiredStatus],
      ['Version', (a) => String(a.JobVersion ?? '—'), { num: true }],
      ['Modified', (a) => ago(a.ModifyTime)],
    ],
  });
}

function evalTable(list) {
  const rows = [...list].sort((a, b) => b.CreateIndex - a.CreateIndex).slice(0, 20);
  return table({
    id: 'evaluations',
    caption: list.length > rows.length ? `the newest ${rows.length} of ${list.length}` : null,
    rows,
    rowAttrs: (e) => ({ 'data-eval': e.ID, 'data-status': e.Status }),
    columns: [
      ['ID', (e) => h('span', { class: 'mono' }, shortId(e.ID))],
      ['Triggered by', (e) => e.TriggeredBy],
      ['Status', (e) => [badge(e.Status), e.StatusDescription ? ` ${e.StatusDescription}` : '']],
      ['Placement failures', (e) => placementFailures(e)],
      ['Created', (e) => ago(e.CreateTime)],
    ],
  });
}

/** Why an evaluation could not place a group's allocations, in words. */
function placementFailures(evaluation) {
  const groups = Object.entries(evaluation.FailedTGAllocs || {});
  if (!groups.length) return h('span', { class: 'empty' }, 'none');
  return h('ul', { class: 'failures' }, groups.map(([group, m]) => {
    const lines = [`${m.NodesEvaluated || 0} nodes evaluated`];
    if (!m.NodesEvaluated) lines.push('no node in the job\'s datacenters is ready');
    for (const [what, n] of Object.entries(m.ConstraintFiltered || {})) lines.push(`constraint ${what} filtered ${n}`);
    for (const [what, n] of Object.entries(m.ClassFiltered || {})) lines.push(`class ${what} filtered ${n}`);
    if (m.NodesExhausted) lines.push(`${m.NodesExhausted} exhausted`);
    for (const [what, n] of Object.entries(m.DimensionExhausted || {})) lines.push(`${what} exhausted on ${n}`);
    for (const [what, n] of Object.entries(m.QuotaExhausted || {})) lines.push(`quota ${what}: ${n}`);
    if (m.CoalescedFailures) lines.push(`${m.CoalescedFailures} more allocations failed the same way`);
    return h('li', null, h('strong', null, `group ${group}: `), lines.join('; '));
  }));
}

function versionTable(answer) {
  const versions = answer?.Versions || [];
  const diffs = answer?.Diffs || [];
  return table({
    id: 'versions',
    rows: versions,
    columns: [
      ['Version', (v) => String(v.Version), { num: true }],
      ['Stable', (v) => (v.Stable ? 'yes' : 'no')],
      ['Submitted', (v) => time(v.SubmitTime)],
      ['Changes from the one before', (v, i = versions.indexOf(v)) => diffSummary(diffs[i])],
    ],
  });
}

/** The fields a version changed, from Nomad's JobDiff. */
function diffSummary(diff) {
  if (!diff) return h('span', { class: 'empty' }, '—');
  const lines = [];
  const walk = (prefix, d) => {
    for (const f of d.Fields || []) if (f.Type !== 'None') lines.push(`${prefix}${f.Name}: ${f.Old || '∅'} → ${f.New || '∅'}`);
    for (const o of d.Objects || []) if (o.Type !== 'None') walk(`${prefix}${o.Name}.`, o);
    for (const g of d.TaskGroups || []) if (g.Type !== 'None') walk(`${prefix}group ${g.Name}: `, g);
    for (const t of d.Tasks || []) if (t.Type !== 'None') walk(`${prefix}task ${t.Name}: `, t);
  };
  walk('', diff);
  if (!lines.length) return h('span', { class: 'empty' }, 'no changes');
  return h('details', null, h('summary', null, `${lines.length} changed`), h('ul', null, lines.map((l) => h('li', { class: 'mono' }, l))));
}
