// One allocation: its facts and task states with their events, kept live
// by a blocking query on the allocation; restart and stop; a task's log
// (stdout or stderr) streamed as plain text while "Follow" is on; CPU and
// memory charts sampled from the client's stats while the page is open;
// and a browser of the allocation's directory.
import { get, put, watch, token, enc, sleep } from '../api.js';
import { h, replace, table, facts, field, confirmButton } from '../dom.js';
import { badge, shortId, time, ago, bytes } from '../format.js';
import { lineChart } from '../chart.js';

/** The most log text kept on screen; older text is dropped first. */
const LOG_LIMIT = 512 * 1024;
/** How much of a log's end is shown when it is opened. */
const LOG_TAIL = 64 * 1024;

export async function render(main, [id], ctx) {
  const header = h('div');
  const tasks = h('section', { 'aria-labelledby': 'tasks-title' });
  const logs = h('section', { 'aria-labelledby': 'logs-title' });
  const usage = h('section', { 'aria-labelledby': 'usage-title' });
  const files = h('section', { 'aria-labelledby': 'files-title' });
  replace(main, h('h1', { tabindex: -1 }, `Allocation ${shortId(id)}`), header, usage, tasks, logs, files);
  let logView = null;
  let live = true;
  let sampling = false;
  await watch(`/v1/allocation/${enc(id)}`, (alloc) => {
    replace(header, allocHeader(alloc, ctx));
    replace(tasks, h('h2', { id: 'tasks-title' }, 'Tasks'), taskStates(alloc));
    if (!logView) {
      logView = logPanel(logs, alloc, ctx.signal);
      fileBrowser(files, alloc.ID, ctx.signal);
    }
    live = !['complete', 'failed', 'lost'].includes(alloc.ClientStatus);
    if (!sampling && live && alloc.NodeID) {
      sampling = true;
      sampleStats(usage, alloc, ctx.signal, () => live).finally(() => { sampling = false; });
    }
  }, { signal: ctx.signal, onError: (e) => ctx.say(`Allocation: ${e.message}`) });
}

/** How often the charts take a sample, and how many they keep. */
const SAMPLE_MS = 3000;
const SAMPLES = 60;

/** Reads the allocation's stats every SAMPLE_MS while the page is open
 *  and the allocation runs; draws CPU and memory over the last samples.
 *  The loop ends with the page's signal (leaving the page). */
async function sampleStats(section, alloc, signal, stillLive) {
  const cpu = [];
  const memory = [];
  const limits = allocLimits(alloc);
  const cpuBox = h('div', { id: 'cpu-chart', class: 'chart' });
  const memBox = h('div', { id: 'memory-chart', class: 'chart' });
  const state = h('p', { id: 'usage-state', class: 'hint', 'aria-live': 'polite' }, 'Sampling…');
  replace(section, h('h2', { id: 'usage-title' }, 'Resource use'), h('div', { class: 'charts' }, cpuBox, memBox), state);
  while (!signal.aborted && stillLive()) {
    try {
      const stats = await get(`/v1/client/allocation/${enc(alloc.ID)}/stats`, { signal });
      const usage = stats.ResourceUsage || {};
      const at = stats.Timestamp ? stats.Timestamp / 1e6 : Date.now();
      const mem = usage.MemoryStats || {};
      cpu.push([at, usage.CpuStats?.TotalTicks || 0]);
      memory.push([at, (mem.RSS || mem.Usage || 0) / (1024 * 1024)]);
      if (cpu.length > SAMPLES) { cpu.shift(); memory.shift(); }
      replace(cpuBox, lineChart({ title: 'CPU', unit: 'MHz', points: cpu, max: limits.cpu, format: (v) => `${Math.round(v)} MHz` }));
      replace(memBox, lineChart({ title: 'Memory', unit: 'MiB', points: memory, max: limits.memory, format: (v) => `${v >= 10 ? Math.round(v) : v.toFixed(1)} MiB` }));
      state.textContent = `${cpu.length} samples, one every ${SAMPLE_MS / 1000} s; last at ${new Date(at).toLocaleTimeString()}.`;
    } catch (e) {
      if (signal.aborted) return;
      state.textContent = `Stats: ${e.message}`;
    }
    await sleep(SAMPLE_MS, signal);
  }
  if (!signal.aborted) state.textContent = 'The allocation has stopped; sampling ended.';
}

/** The CPU (MHz) and memory (MiB) the allocation was given. */
function allocLimits(alloc) {
  let cpu = 0;
  let memory = 0;
  for (const task of Object.values(alloc.AllocatedResources?.Tasks || {})) {
    cpu += task.Cpu?.CpuShares || 0;
    memory += task.Memory?.MemoryMB || 0;
  }
  return { cpu: cpu || alloc.Resources?.CPU || 0, memory: memory || alloc.Resources?.MemoryMB || 0 };
}

/** The largest file shown whole; a longer one shows its first part. */
const FILE_CAP = 256 * 1024;

/** The allocation directory: a path bar, the listing (directories open
 *  in place), and a file's text under it. */
function fileBrowser(section, allocId, signal) {
  const crumbs = h('nav', { id: 'file-path', 'aria-label': 'Directory' });
  const listing = h('div', { id: 'file-list' });
  const viewer = h('div', { id: 'file-view' });
  replace(section, h('h2', { id: 'files-title' }, 'Files'), crumbs, listing, viewer);
  const base = `/v1/client/fs`;
  const open = async (path) => {
    replace(viewer);
    replace(crumbs, pathLinks(path, open));
    try {
      const entries = await get(`${base}/ls/${enc(allocId)}?path=${enc(path)}`, { signal });
      const rows = [...(entries || [])].sort((a, b) => (b.IsDir - a.IsDir) || a.Name.localeCompare(b.Name));
      replace(listing, table({
        id: 'files',
        caption: `${rows.length} entries in ${path}`,
        empty: 'This directory is empty.',
        rows,
        rowAttrs: (f) => ({ 'data-file': f.Name, 'data-dir': f.IsDir ? 'yes' : 'no' }),
        columns: [
          ['Name', (f) => h('button', { type: 'button', class: 'link', onclick: () => (f.IsDir ? open(join(path, f.Name)) : show(join(path, f.Name), f)) }, f.IsDir ? `${f.Name}/` : f.Name)],
          ['Mode', (f) => h('span', { class: 'mono' }, f.FileMode)],
          ['Size', (f) => (f.IsDir ? '—' : bytes(f.Size)), { num: true }],
          ['Modified', (f) => ago(f.ModTime)],
        ],
      }));
      listing.querySelector('button')?.focus({ preventScroll: true });
    } catch (e) {
      if (!signal.aborted) replace(listing, h('p', { class: 'empty' }, `Cannot list ${path}: ${e.message}`));
    }
  };
  const show = async (path, info) => {
    replace(viewer, h('p', null, `Reading ${path}…`));
    try {
      const whole = info.Size <= FILE_CAP;
      const url = whole
        ? `${base}/cat/${enc(allocId)}?path=${enc(path)}`
        : `${base}/readat/${enc(allocId)}?path=${enc(path)}&offset=0&limit=${FILE_CAP}`;
      const text = await get(url, { signal });
      replace(viewer,
        h('h3', null, path),
        whole ? null : h('p', { class: 'hint' }, `The first ${bytes(FILE_CAP)} of ${bytes(info.Size)}.`),
        h('pre', { id: 'file-text', class: 'log', tabindex: 0, 'aria-label': `Contents of ${path}` }, typeof text === 'string' ? text : JSON.stringify(text, null, 2)));
    } catch (e) {
      if (!signal.aborted) replace(viewer, h('p', { class: 'empty' }, `Cannot read ${path}: ${e.message}`));
    }
  };
  open('/');
}

const join = (dir, name) => (dir.endsWith('/') ? `${dir}${name}` : `${dir}/${name}`);

/** "/ alloc / logs" with each part a button back to that directory. */
function pathLinks(path, open) {
  const parts = path.split('/').filter(Boolean);
  const out = [h('button', { type: 'button', class: 'link', onclick: () => open('/') }, 'allocation root')];
  parts.forEach((part, i) => {
    const to = `/${parts.slice(0, i + 1).join('/')}`;
    out.push(' / ', i === parts.length - 1
      ? h('span', { 'aria-current': 'location' }, part)
      : h('button', { type: 'button', class: 'link', onclick: () => open(to) }, part));
  });
  return out;
}

function allocHeader(alloc, ctx) {
  const act = (label, work) => async () => {
    try {
      await work();
      ctx.say(`${label}: done.`, true);
    } catch (e) {
      ctx.say(`${label}: ${e.message}`);
    }
  };
  return [
    facts([
      ['Name', alloc.Name],
      ['Status', h('span', { id: 'alloc-status' }, badge(alloc.ClientStatus))],
      ['Desired', alloc.DesiredStatus],
      ['Job', h('a', { href: `/ui/jobs/${enc(alloc.Namespace)}/${enc(alloc.JobID)}` }, alloc.JobID)],
      ['Group', alloc.TaskGroup],
      ['Node', alloc.NodeID ? h('a', { href: `/ui/nodes/${enc(alloc.NodeID)}` }, alloc.NodeName || shortId(alloc.NodeID)) : '—'],
      ['Created', time(alloc.CreateTime)],
      ['Modified', ago(alloc.ModifyTime)],
    ]),
    alloc.ClientDescription ? h('p', null, alloc.ClientDescription) : null,
    h('div', { class: 'actions' },
      h('button', { type: 'button', onclick: act('Restart', () => put(`/v1/client/allocation/${enc(alloc.ID)}/restart`, {})) }, 'Restart'),
      confirmButton('Stop', 'Yes, stop allocation', act('Stop', () => put(`/v1/allocation/${enc(alloc.ID)}/stop`, {})))),
  ];
}

function taskStates(alloc) {
  const states = Object.entries(alloc.TaskStates || {}).sort(([a], [b]) => a.localeCompare(b));
  if (!states.length) return h('p', { class: 'empty' }, 'No task has started yet.');
  return states.map(([name, state]) => h('div', { 'data-task': name },
    h('h3', null, `Task ${name} `, badge(state.State)),
    facts([
      ['Restarts', String(state.Restarts || 0)],
      ['Started', time(state.StartedAt)],
      ['Finished', time(state.FinishedAt)],
      ['Failed', state.Failed ? 'yes' : 'no'],
    ]),
    table({
      caption: `Events of ${name}`,
      rows: [...(state.Events || [])].reverse(),
      columns: [
        ['Time', (e) => time(e.Time)],
        ['Type', (e) => e.Type],
        ['Description', (e) => e.DisplayMessage || e.Message || ''],
      ],
    })));
}

/** The log viewer: task, stream and follow pickers over one <pre>. */
function logPanel(section, alloc, pageSignal) {
  const taskNames = Object.keys(alloc.TaskStates || {}).length
    ? Object.keys(alloc.TaskStates).sort()
    : (alloc.Job?.TaskGroups || []).find((g) => g.Name === alloc.TaskGroup)?.Tasks?.map((t) => t.Name) || [];
  const task = h('select', { id: 'log-task' }, taskNames.map((n) => h('option', { value: n }, n)));
  const stream = h('select', { id: 'log-stream' }, h('option', { value: 'stdout' }, 'stdout'), h('option', { value: 'stderr' }, 'stderr'));
  const follow = h('input', { id: 'log-follow', type: 'checkbox', checked: true });
  const out = h('pre', { id: 'log', class: 'log', role: 'log', 'aria-live': 'off', tabindex: 0, 'aria-label': 'Log output' });
  const state = h('p', { id: 'log-state', class: 'hint', 'aria-live': 'polite' });
  replace(section,
    h('h2', { id: 'logs-title' }, 'Logs'),
    h('div', { class: 'toolbar' }, field('Task', task), field('Stream', stream),
      h('div', { class: 'field' }, h('label', { for: 'log-follow' }, 'Follow'), follow)),
    out, state);
  let current = null;
  pageSignal.addEventListener('abort', () => current?.abort(), { once: true });
  const start = () => {
    current?.abort();
    current = new AbortController();
    out.textContent = '';
    if (!task.value) { state.textContent = 'This allocation has no task.'; return; }
    readLog(alloc.ID, task.value, stream.value, follow.checked, out, state, current.signal);
  };
  for (const control of [task, stream, follow]) control.addEventListener('change', start);
  start();
  return { start };
}

/** Streams a log into `out` until it ends or `signal` aborts. */
async function readLog(allocId, task, type, follow, out, state, signal) {
  const url = `/v1/client/fs/logs/${enc(allocId)}?task=${enc(task)}&type=${type}&plain=true`
    + `&origin=end&offset=${LOG_TAIL}&follow=${follow}`;
  const headers = token() ? { 'X-Nomad-Token': token() } : {};
  state.textContent = follow ? 'Following…' : 'Reading…';
  try {
    const res = await fetch(url, { headers, signal });
    if (!res.ok) throw new Error(`${(await res.text()).trim()} (${res.status})`);
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      const atBottom = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
      let text = out.textContent + decoder.decode(value, { stream: true });
      if (text.length > LOG_LIMIT) text = text.slice(text.length - LOG_LIMIT);
      out.textContent = text;
      if (atBottom) out.scrollTop = out.scrollHeight;
    }
    state.textContent = follow ? 'The log stream ended.' : 'End of log.';
  } catch (e) {
    if (!signal.aborted) state.textContent = `Log: ${e.message}`;
  }
}
