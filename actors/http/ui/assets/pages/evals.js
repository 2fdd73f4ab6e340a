// Evaluations: the list (`/ui/evaluations`, one blocking query on
// /v1/evaluations narrowed on the server by a status and job filter) and
// one evaluation (`/ui/evaluations/:id`): its facts, the evaluations
// before and after it, its allocations, and why it could not place a
// group's allocations, in words (which constraint filtered how many
// nodes, which dimension ran out on how many, what a blocked evaluation
// waits for).
import { get, watch, enc } from '../api.js';
import { h, replace, table, facts, field } from '../dom.js';
import { badge, shortId, ago, time } from '../format.js';
import { allocTable } from './job.js';

/** The most evaluations drawn at once (newest first). */
const SHOWN = 200;
const STATUSES = ['', 'blocked', 'pending', 'complete', 'failed', 'canceled'];

/** A value quoted for a go-bexpr filter. */
const quote = (text) => `"${text.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;

export async function renderList(main, _params, ctx) {
  const namespace = ctx.query.get('namespace') || '*';
  const status = h('select', { id: 'eval-status' }, STATUSES.map((s) =>
    h('option', { value: s, selected: s === (ctx.query.get('status') || '') }, s || 'any')));
  const job = h('input', { id: 'eval-job', type: 'search', placeholder: 'exact job ID', value: ctx.query.get('job') || '' });
  const list = h('div', { id: 'eval-list' }, h('p', null, 'Loading evaluations…'));
  const form = h('form', { class: 'toolbar', role: 'search', onsubmit: (e) => {
    e.preventDefault();
    const params = new URLSearchParams();
    if (namespace !== '*') params.set('namespace', namespace);
    if (status.value) params.set('status', status.value);
    if (job.value.trim()) params.set('job', job.value.trim());
    const search = params.toString();
    ctx.navigate(`/ui/evaluations${search ? `?${search}` : ''}`, { replaceState: true });
  } }, field('Status', status), field('Job', job), h('div', { class: 'field' }, h('button', { type: 'submit' }, 'Show')));
  status.addEventListener('change', () => form.requestSubmit());
  replace(main, h('h1', { tabindex: -1 }, 'Evaluations'), form, list);

  const clauses = [];
  if (ctx.query.get('status')) clauses.push(`Status == ${quote(ctx.query.get('status'))}`);
  if (ctx.query.get('job')) clauses.push(`JobID == ${quote(ctx.query.get('job'))}`);
  const filter = clauses.length ? `&filter=${enc(clauses.join(' and '))}` : '';
  await watch(`/v1/evaluations?namespace=${enc(namespace)}${filter}`, (data) => {
    replace(list, evalListTable(data));
  }, { signal: ctx.signal, onError: (e) => ctx.say(`Evaluations: ${e.message}`) });
}

function evalListTable(all) {
  const rows = [...all].sort((a, b) => b.CreateIndex - a.CreateIndex).slice(0, SHOWN);
  return table({
    id: 'evaluations',
    caption: all.length > rows.length ? `The newest ${rows.length} of ${all.length}` : `${all.length} evaluations`,
    empty: 'No evaluation matches.',
    rows,
    rowAttrs: (e) => ({ 'data-eval': e.ID, 'data-status': e.Status }),
    columns: [
      ['ID', (e) => h('a', { href: `/ui/evaluations/${enc(e.ID)}`, class: 'mono' }, shortId(e.ID))],
      ['Job', (e) => h('a', { href: `/ui/jobs/${enc(e.Namespace)}/${enc(e.JobID)}` }, e.JobID)],
      ['Namespace', (e) => e.Namespace],
      ['Type', (e) => e.Type],
      ['Triggered by', (e) => e.TriggeredBy],
      ['Status', (e) => badge(e.Status)],
      ['Placement failures', (e) => (Object.keys(e.FailedTGAllocs || {}).length ? badge('failed', Object.keys(e.FailedTGAllocs).join(', ')) : '—')],
      ['Priority', (e) => String(e.Priority), { num: true }],
      ['Created', (e) => ago(e.CreateTime)],
    ],
  });
}

export async function render(main, [id], ctx) {
  const header = h('div');
  const why = h('section', { 'aria-labelledby': 'why-title' });
  const allocs = h('section', { 'aria-labelledby': 'allocs-title' });
  replace(main, h('h1', { tabindex: -1 }, `Evaluation ${shortId(id)}`), header, why, allocs);
  await watch(`/v1/evaluation/${enc(id)}`, async (evaluation) => {
    replace(header, evalFacts(evaluation));
    replace(why, h('h2', { id: 'why-title' }, 'Placement'), explain(evaluation));
    const list = await get(`/v1/evaluation/${enc(id)}/allocations`, { signal: ctx.signal });
    replace(allocs, h('h2', { id: 'allocs-title' }, 'Allocations it placed'), allocTable(list, { showJob: true }));
  }, { signal: ctx.signal, onError: (e) => ctx.say(`Evaluation: ${e.message}`) });
}

const evalLink = (id) => (id ? h('a', { href: `/ui/evaluations/${enc(id)}`, class: 'mono' }, shortId(id)) : '—');

function evalFacts(e) {
  return [
    facts([
      ['Status', h('span', { id: 'eval-status-badge' }, badge(e.Status))],
      ['Job', h('a', { href: `/ui/jobs/${enc(e.Namespace)}/${enc(e.JobID)}` }, e.JobID)],
      ['Namespace', e.Namespace],
      ['Type', e.Type],
      ['Triggered by', e.TriggeredBy],
      ['Priority', String(e.Priority)],
      ['Node', e.NodeID ? h('a', { href: `/ui/nodes/${enc(e.NodeID)}` }, shortId(e.NodeID)) : '—'],
      ['Deployment', e.DeploymentID ? h('span', { class: 'mono' }, shortId(e.DeploymentID)) : '—'],
      ['Previous', evalLink(e.PreviousEval)],
      ['Next', evalLink(e.NextEval)],
      ['Blocked evaluation', evalLink(e.BlockedEval)],
      ['Created', time(e.CreateTime)],
      ['Modified', ago(e.ModifyTime)],
    ]),
    e.StatusDescription ? h('p', { id: 'eval-description' }, e.StatusDescription) : null,
    e.WaitUntil ? h('p', null, `Waits until ${time(e.WaitUntil)} before it runs.`) : null,
  ];
}

/** What a reader needs to know about where the allocations went. */
function explain(e) {
  const failed = Object.entries(e.FailedTGAllocs || {});
  const queued = Object.entries(e.QueuedAllocations || {}).filter(([, n]) => n > 0);
  const parts = [];
  if (e.Status === 'blocked') parts.push(h('p', { id: 'blocked-reason' }, blockedReason(e)));
  if (e.BlockedEval) {
    parts.push(h('p', null, 'The placements that failed wait in the blocked evaluation ', evalLink(e.BlockedEval),
      ', which runs again when a node joins, becomes eligible or frees resources.'));
  }
  if (queued.length) {
    parts.push(h('p', null, 'Queued: ', queued.map(([g, n]) => `${n} of group ${g}`).join(', '), '.'));
  }
  if (!failed.length) {
    parts.push(h('p', { class: 'empty' }, e.Status === 'complete' ? 'Every allocation it had to place was placed.' : 'No placement failed.'));
    return parts;
  }
  parts.push(h('div', { id: 'failed-groups' }, failed.map(([group, m]) => groupFailure(group, m))));
  return parts;
}

function blockedReason(e) {
  const classes = Object.entries(e.ClassEligibility || {});
  const eligible = classes.filter(([, ok]) => ok).map(([c]) => c || '(no class)');
  const ineligible = classes.filter(([, ok]) => !ok).map(([c]) => c || '(no class)');
  const parts = ['Blocked: some allocations could not be placed, and this evaluation waits for the cluster to change.'];
  if (e.EscapedComputedClass) {
    parts.push('The job\'s constraints read values unique to each node, so any node that changes re-runs it.');
  } else {
    if (eligible.length) parts.push(`A node of an eligible class (${eligible.join(', ')}) freeing resources re-runs it.`);
    if (ineligible.length) parts.push(`Nodes of computed class ${ineligible.join(', ')} cannot run it.`);
    parts.push('A node of a class not seen yet joining re-runs it.');
  }
  return parts.join(' ');
}

/** One group's AllocMetric as sentences and small tables. */
function groupFailure(group, m) {
  const count = 1 + (m.CoalescedFailures || 0);
  const available = Object.entries(m.NodesAvailable || {});
  const lines = [
    `${count} allocation${count === 1 ? '' : 's'} of group ${group} could not be placed.`,
    `${m.NodesEvaluated || 0} nodes evaluated${m.NodesInPool ? ` of ${m.NodesInPool} in the node pool` : ''}`
      + `${available.length ? ` (ready per datacenter: ${available.map(([dc, n]) => `${dc} ${n}`).join(', ')})` : ''}.`,
  ];
  if (!m.NodesEvaluated) lines.push('No ready node is in the job\'s datacenters and node pool.');
  if (m.NodesFiltered) lines.push(`${m.NodesFiltered} nodes were filtered out before ranking.`);
  if (m.NodesExhausted) lines.push(`${m.NodesExhausted} nodes had too little free resources.`);
  const pairs = (map) => Object.entries(map || {}).sort((a, b) => b[1] - a[1]);
  const reasons = [
    ...pairs(m.ConstraintFiltered).map(([what, n]) => ['constraint', what, n, 'filtered']),
    ...pairs(m.ClassFiltered).map(([what, n]) => ['node class', what, n, 'filtered']),
    ...pairs(m.DimensionExhausted).map(([what, n]) => ['resource', what, n, 'exhausted']),
    ...pairs(m.ClassExhausted).map(([what, n]) => ['class', what, n, 'exhausted']),
    ...pairs(m.QuotaExhausted).map(([what, n]) => ['quota', what, n, 'exhausted']),
  ];
  return h('div', { class: 'failure', 'data-group': group },
    h('h3', null, `Group ${group}`),
    lines.map((l) => h('p', null, l)),
    table({
      caption: `Why nodes could not take group ${group}`,
      rows: reasons,
      empty: 'No node was filtered or exhausted.',
      columns: [
        ['Kind', ([kind]) => kind],
        ['What', ([, what]) => h('code', null, what)],
        ['Nodes', ([, , n]) => String(n), { num: true }],
        ['Effect', ([, , , effect]) => effect],
      ],
    }));
}

/** Why an evaluation could not place a group's allocations, in one line
 *  per group (the job page's evaluations table). */
export function placementFailures(evaluation) {
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
