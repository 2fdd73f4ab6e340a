// The jobs list: every job of a namespace (or all) with its status, type
// and allocation counts, live through one blocking query on /v1/jobs;
// the filter box narrows the list in the browser without asking again.
import { get, watch, enc } from '../api.js';
import { h, replace, table, field } from '../dom.js';
import { badge, summaryCounts, totalSummary } from '../format.js';

export async function render(main, _params, ctx) {
  const namespace = ctx.query.get('namespace') || 'default';
  const picker = h('select', { id: 'namespace', onchange: () => {
    ctx.navigate(`/ui/jobs?namespace=${enc(picker.value)}`);
  } }, h('option', { value: namespace }, namespace === '*' ? 'All namespaces' : namespace));
  const filter = h('input', { id: 'job-filter', type: 'search', placeholder: 'name or ID', value: ctx.query.get('filter') || '' });
  const list = h('div', { id: 'job-list', 'aria-live': 'off' }, h('p', null, 'Loading jobs…'));
  const runLink = h('a', { href: `/ui/jobs/run?namespace=${enc(namespace)}`, class: 'button-link' }, 'Run job');
  replace(main,
    h('h1', { tabindex: -1 }, 'Jobs'),
    h('div', { class: 'toolbar' }, field('Namespace', picker), field('Filter', filter), h('div', { class: 'field' }, runLink)),
    list);

  fillNamespaces(picker, namespace, ctx).catch(() => { /* the picker keeps the current one */ });
  let jobs = null;
  const draw = () => jobs && replace(list, jobTable(jobs, filter.value));
  filter.addEventListener('input', draw);
  await watch(`/v1/jobs?namespace=${enc(namespace)}`, (data) => {
    jobs = data;
    draw();
  }, { signal: ctx.signal, onError: (e) => ctx.say(`Jobs: ${e.message}`) });
}

/** The namespaces the token may see, and "All namespaces". */
async function fillNamespaces(picker, current, ctx) {
  const namespaces = await get('/v1/namespaces', { signal: ctx.signal });
  const names = namespaces.map((n) => n.Name);
  if (!names.includes(current) && current !== '*') names.push(current);
  replace(picker,
    names.sort().map((n) => h('option', { value: n, selected: n === current }, n)),
    h('option', { value: '*', selected: current === '*' }, 'All namespaces'));
}

function jobTable(jobs, filterText) {
  const needle = filterText.trim().toLowerCase();
  const shown = jobs
    .filter((j) => !needle || j.ID.toLowerCase().includes(needle) || j.Name.toLowerCase().includes(needle))
    .sort((a, b) => a.ID.localeCompare(b.ID) || a.Namespace.localeCompare(b.Namespace));
  return table({
    id: 'jobs',
    caption: `${shown.length} of ${jobs.length} jobs`,
    empty: jobs.length ? 'No job matches the filter.' : 'No jobs yet. Run one.',
    rows: shown,
    rowAttrs: (j) => ({ 'data-job': j.ID }),
    columns: [
      ['Name', (j) => h('a', { href: `/ui/jobs/${enc(j.Namespace)}/${enc(j.ID)}` }, j.ID)],
      ['Namespace', (j) => j.Namespace],
      ['Type', (j) => j.Type + (j.Periodic ? ' (periodic)' : '') + (j.ParameterizedJob ? ' (parameterized)' : '')],
      ['Status', (j) => badge(j.Status)],
      ['Groups', (j) => String(Object.keys(j.JobSummary?.Summary || {}).length), { num: true }],
      ['Allocations', (j) => summaryCounts(totalSummary(j.JobSummary))],
      ['Priority', (j) => String(j.Priority), { num: true }],
    ],
  });
}
