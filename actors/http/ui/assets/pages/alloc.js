// One allocation: its facts and task states with their events, kept live
// by a blocking query on the allocation; restart and stop; and a task's
// log (stdout or stderr) streamed as plain text while "Follow" is on.
import { put, watch, token, enc } from '../api.js';
import { h, replace, table, facts, field, confirmButton } from '../dom.js';
import { badge, shortId, time, ago } from '../format.js';

/** The most log text kept on screen; older text is dropped first. */
const LOG_LIMIT = 512 * 1024;
/** How much of a log's end is shown when it is opened. */
const LOG_TAIL = 64 * 1024;

export async function render(main, [id], ctx) {
  const header = h('div');
  const tasks = h('section', { 'aria-labelledby': 'tasks-title' });
  const logs = h('section', { 'aria-labelledby': 'logs-title' });
  replace(main, h('h1', { tabindex: -1 }, `Allocation ${shortId(id)}`), header, tasks, logs);
  let logView = null;
  await watch(`/v1/allocation/${enc(id)}`, (alloc) => {
    replace(header, allocHeader(alloc, ctx));
    replace(tasks, h('h2', { id: 'tasks-title' }, 'Tasks'), taskStates(alloc));
    if (!logView) logView = logPanel(logs, alloc, ctx.signal);
  }, { signal: ctx.signal, onError: (e) => ctx.say(`Allocation: ${e.message}`) });
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
