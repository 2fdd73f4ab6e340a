// One job: its facts, task groups with counts and resources, the
// allocations table kept live by one blocking query on the job's
// allocations (each change, and each 10 s wait that ends quiet, also
// re-reads the job, its summary, deployments and evaluations), its
// deployments with promote and fail, its versions with what changed and
// a revert button, its evaluations with why a placement failed (which
// constraint filtered how many nodes, what was exhausted), and the
// actions: stop/start, scale a group, dispatch a parameterized job.
import { get, put, del, watch, enc } from '../api.js';
import { h, replace, table, facts, field, confirmButton, replaceIfChanged } from '../dom.js';
import { badge, summaryCounts, shortId, ago, time, mhz, mib } from '../format.js';
import { placementFailures } from './evals.js';

export async function render(main, [namespace, id], ctx) {
  const q = `namespace=${enc(namespace)}`;
  const base = `/v1/job/${enc(id)}`;
  const header = h('div');
  const groups = h('section', { 'aria-labelledby': 'groups-title' });
  const allocs = h('section', { 'aria-labelledby': 'allocs-title' });
  const versions = h('section', { 'aria-labelledby': 'versions-title' });
  const evals = h('section', { 'aria-labelledby': 'evals-title' });
  const deployments = h('section', { 'aria-labelledby': 'deployments-title' });
  // Forms are built once per page and never redrawn by a refresh, so a
  // refresh cannot wipe what is being typed.
  const forms = h('div');
  replace(main, h('h1', { tabindex: -1 }, id), header, forms, groups, deployments, allocs, evals, versions);
  let shownVersion = null;
  let formsFor = null;
  let latest = null;

  const refreshJob = async () => {
    const [job, summary, evaluations, deploys] = await Promise.all([
      get(`${base}?${q}`, { signal: ctx.signal }),
      get(`${base}/summary?${q}`, { signal: ctx.signal }),
      get(`${base}/evaluations?${q}`, { signal: ctx.signal }),
      get(`${base}/deployments?${q}`, { signal: ctx.signal }),
    ]);
    latest = job;
    const env = { base, q, ctx, refresh: refreshJob, latest: () => latest };
    replaceIfChanged(evals, evaluations, () => [
      h('h2', { id: 'evals-title' }, 'Evaluations'),
      evalTable(evaluations),
      h('p', null, h('a', { href: `/ui/evaluations?job=${enc(job.ID)}&namespace=${enc(job.Namespace)}` }, 'All evaluations of this job')),
    ]);
    replaceIfChanged(header, [job.Stop, job.Status, job.Version], () => jobHeader(job, env));
    replaceIfChanged(groups, [job.TaskGroups, summary?.Summary], () => [h('h2', { id: 'groups-title' }, 'Task groups'), groupTable(job, summary)]);
    replaceIfChanged(deployments, deploys, () => [h('h2', { id: 'deployments-title' }, 'Deployments'), deploymentList(deploys, env)]);
    const groupNames = (job.TaskGroups || []).map((g) => g.Name).join('\n');
    if (formsFor !== groupNames) {
      formsFor = groupNames;
      replace(forms, scaleForm(job, env), job.ParameterizedJob && !job.Dispatched ? dispatchForm(job, env) : null);
    }
    if (job.Version !== shownVersion) {
      shownVersion = job.Version;
      const answer = await get(`${base}/versions?${q}&diffs=true`, { signal: ctx.signal });
      replace(versions, h('h2', { id: 'versions-title' }, 'Versions'), versionTable(answer, job, env));
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
      ['ID', (e) => h('a', { href: `/ui/evaluations/${enc(e.ID)}`, class: 'mono' }, shortId(e.ID))],
      ['Triggered by', (e) => e.TriggeredBy],
      ['Status', (e) => [badge(e.Status), e.StatusDescription ? ` ${e.StatusDescription}` : '']],
      ['Placement failures', (e) => placementFailures(e)],
      ['Created', (e) => ago(e.CreateTime)],
    ],
  });
}

function versionTable(answer, job, { base, q, ctx, refresh }) {
  const versions = answer?.Versions || [];
  const diffs = answer?.Diffs || [];
  // Nomad's revert: the job as it was at that version becomes the next
  // version; EnforcePriorVersion refuses it if someone changed the job
  // since this page read it.
  const revert = (v) => confirmButton(`Revert to ${v.Version}`, `Yes, revert to version ${v.Version}`, async () => {
    try {
      await put(`${base}/revert?${q}`, { JobID: job.ID, JobVersion: v.Version, EnforcePriorVersion: job.Version });
      ctx.say(`Job ${job.ID} reverted to version ${v.Version}.`, true);
      await refresh();
    } catch (e) {
      ctx.say(`Revert: ${e.message}`);
    }
  }, 'primary', `revert ${job.Version} to ${v.Version}`);
  return table({
    id: 'versions',
    rows: versions,
    rowAttrs: (v) => ({ 'data-version': v.Version }),
    columns: [
      ['Version', (v) => String(v.Version), { num: true }],
      ['Stable', (v) => (v.Stable ? 'yes' : 'no')],
      ['Submitted', (v) => time(v.SubmitTime)],
      ['Changes from the one before', (v) => diffSummary(diffs[versions.indexOf(v)])],
      ['', (v) => (v.Version === job.Version ? h('span', { class: 'empty' }, 'current') : revert(v))],
    ],
  });
}

/** The job's deployments, newest first: status, each group's counts,
 *  and Promote (canaries placed and healthy, not yet promoted) and Fail
 *  for the one still running. */
function deploymentList(list, { ctx, refresh }) {
  if (!list?.length) return h('p', { id: 'deployments', class: 'empty' }, 'No deployments.');
  const rows = [...list].sort((a, b) => b.CreateIndex - a.CreateIndex).slice(0, 5);
  const act = (label, work) => async () => {
    try {
      await work();
      ctx.say(`Deployment ${label}.`, true);
      await refresh();
    } catch (e) {
      ctx.say(`Deployment: ${e.message}`);
    }
  };
  return h('div', { id: 'deployments' }, rows.map((d) => {
    const groups = Object.entries(d.TaskGroups || {}).sort(([a], [b]) => a.localeCompare(b));
    const active = d.Status === 'running' || d.Status === 'paused' || d.Status === 'pending';
    const needsPromotion = groups.some(([, g]) => g.DesiredCanaries > 0 && !g.Promoted);
    const id = enc(d.ID);
    return h('div', { class: 'deployment', 'data-deployment': d.ID, 'data-status': d.Status },
      h('h3', null, `Deployment ${shortId(d.ID)} `, badge(d.Status), ` for version ${d.JobVersion}`),
      d.StatusDescription ? h('p', { class: 'deployment-status' }, d.StatusDescription) : null,
      table({
        caption: `Groups of deployment ${shortId(d.ID)}`,
        rows: groups,
        rowAttrs: ([name]) => ({ 'data-group': name }),
        columns: [
          ['Group', ([name]) => name],
          ['Desired', ([, g]) => String(g.DesiredTotal ?? 0), { num: true }],
          ['Placed', ([, g]) => String(g.PlacedAllocs ?? 0), { num: true }],
          ['Healthy', ([, g]) => String(g.HealthyAllocs ?? 0), { num: true }],
          ['Unhealthy', ([, g]) => String(g.UnhealthyAllocs ?? 0), { num: true }],
          ['Canaries', ([, g]) => (g.DesiredCanaries ? `${(g.PlacedCanaries || []).length} of ${g.DesiredCanaries}` : '—'), { num: true }],
          ['Promoted', ([, g]) => (g.DesiredCanaries ? (g.Promoted ? 'yes' : 'no') : '—')],
          ['Progress deadline', ([, g]) => time(g.RequireProgressBy)],
        ],
      }),
      active ? h('div', { class: 'actions' },
        needsPromotion ? h('button', { type: 'button', class: 'primary', onclick: act('promoted', () => put(`/v1/deployment/promote/${id}`, { DeploymentID: d.ID, All: true })) }, 'Promote canaries') : null,
        confirmButton('Fail deployment', 'Yes, fail deployment', act('failed', () => put(`/v1/deployment/fail/${id}`, { DeploymentID: d.ID })), 'danger', `fail ${d.ID}`)) : null);
  }));
}

/** Sets a group's count (Nomad's scaling request: a new job version). */
function scaleForm(job, { base, q, ctx, refresh, latest }) {
  const groups = job.TaskGroups || [];
  if (!groups.length || job.Type === 'system' || job.Type === 'sysbatch') return null;
  const group = h('select', { id: 'scale-group' }, groups.map((g) => h('option', { value: g.Name }, g.Name)));
  const count = h('input', { id: 'scale-count', type: 'number', min: 0, step: 1, required: true, value: String(groups[0].Count), size: 5 });
  group.addEventListener('change', () => {
    // The count as it is now, not as it was when the form was built.
    const now = latest().TaskGroups || groups;
    count.value = String(now.find((g) => g.Name === group.value)?.Count ?? 0);
  });
  const form = h('form', { id: 'scale-form', class: 'toolbar', 'aria-labelledby': 'scale-title', onsubmit: async (e) => {
    e.preventDefault();
    const n = Number(count.value);
    if (!Number.isInteger(n) || n < 0) { ctx.say('Scale: the count is a whole number, 0 or more.'); return; }
    const button = form.querySelector('button');
    button.disabled = true;
    try {
      await put(`${base}/scale?${q}`, {
        Count: n,
        Target: { Namespace: job.Namespace, Job: job.ID, Group: group.value },
        Message: 'scaled from the web UI',
      });
      ctx.say(`Group ${group.value} scaled to ${n}.`, true);
      await refresh();
    } catch (err) {
      ctx.say(`Scale: ${err.message}`);
    } finally {
      button.disabled = false;
    }
  } },
  h('h2', { id: 'scale-title', class: 'sr-only' }, 'Scale'),
  field('Task group', group), field('Count', count),
  h('div', { class: 'field' }, h('button', { type: 'submit', class: 'primary' }, 'Scale group')));
  return form;
}

/** Dispatches a parameterized job: a payload (sent base64, as the API
 *  takes it) and meta as key=value lines. */
function dispatchForm(job, { base, q, ctx }) {
  const spec = job.ParameterizedJob || {};
  const payload = h('textarea', { id: 'dispatch-payload', rows: 4, cols: 60, spellcheck: 'false', disabled: spec.Payload === 'forbidden' });
  const meta = h('textarea', { id: 'dispatch-meta', rows: 3, cols: 60, spellcheck: 'false',
    placeholder: [...(spec.MetaRequired || []), ...(spec.MetaOptional || [])].map((k) => `${k}=…`).join('\n') });
  const result = h('p', { id: 'dispatch-result', 'aria-live': 'polite' });
  const form = h('form', { id: 'dispatch-form', 'aria-labelledby': 'dispatch-title', onsubmit: async (e) => {
    e.preventDefault();
    const pairs = {};
    for (const line of meta.value.split('\n').map((l) => l.trim()).filter(Boolean)) {
      const at = line.indexOf('=');
      if (at < 1) { ctx.say(`Dispatch: meta line "${line}" is not key=value.`); return; }
      pairs[line.slice(0, at).trim()] = line.slice(at + 1).trim();
    }
    try {
      const answer = await put(`${base}/dispatch?${q}`, { JobID: job.ID, Payload: base64(payload.value), Meta: pairs });
      replace(result, 'Dispatched ', h('a', { href: `/ui/jobs/${enc(job.Namespace)}/${enc(answer.DispatchedJobID)}` }, answer.DispatchedJobID), '.');
      ctx.say(`Job ${job.ID} dispatched.`, true);
    } catch (err) {
      ctx.say(`Dispatch: ${err.message}`);
    }
  } },
  h('h2', { id: 'dispatch-title' }, 'Dispatch'),
  h('p', { class: 'hint' }, `Payload ${spec.Payload || 'optional'}`,
    spec.MetaRequired?.length ? `; required meta: ${spec.MetaRequired.join(', ')}` : '',
    spec.MetaOptional?.length ? `; optional meta: ${spec.MetaOptional.join(', ')}` : ''),
  h('div', { class: 'toolbar' }, field('Payload', payload), field('Meta (key=value, one a line)', meta)),
  h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Dispatch job')),
  result);
  return form;
}

/** UTF-8 text as base64. */
function base64(text) {
  let binary = '';
  for (const byte of new TextEncoder().encode(text)) binary += String.fromCharCode(byte);
  return btoa(binary);
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
