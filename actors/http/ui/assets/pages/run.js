// "Run job": a job file pasted as HCL or JSON; HCL is parsed by the
// agent (/v1/jobs/parse, so the UI and `herder job run` read it the same
// way), then the job is registered (/v1/jobs) and its page opened.
import { put, request, enc } from '../api.js';
import { h, replace, field } from '../dom.js';

export async function render(main, _params, ctx) {
  const namespace = ctx.query.get('namespace') || 'default';
  const spec = h('textarea', { id: 'jobspec', spellcheck: 'false', required: true, 'aria-describedby': 'jobspec-hint' });
  const outcome = h('div', { id: 'run-outcome', role: 'alert' });
  const submit = h('button', { type: 'submit', class: 'primary' }, 'Run');
  const form = h('form', { id: 'run-form' },
    field('Job specification (HCL or JSON)', spec),
    h('p', { id: 'jobspec-hint', class: 'hint' },
      `HCL is parsed by the agent; JSON may be a job or {"Job": …}. A job without a namespace goes to "${namespace}".`),
    h('div', { class: 'actions' }, submit, h('a', { href: `/ui/jobs?namespace=${enc(namespace)}` }, 'Cancel')),
    outcome);
  replace(main, h('h1', { tabindex: -1 }, 'Run a job'), form);
  spec.focus();

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    submit.disabled = true;
    replace(outcome);
    try {
      const job = await parse(spec.value, namespace, ctx.signal);
      if (!job.Namespace) job.Namespace = namespace;
      await put('/v1/jobs', { Job: job }, { signal: ctx.signal });
      ctx.navigate(`/ui/jobs/${enc(job.Namespace)}/${enc(job.ID)}`);
    } catch (err) {
      if (!ctx.signal.aborted) replace(outcome, h('p', { class: 'notice' }, err.message));
    } finally {
      submit.disabled = false;
    }
  });
}

/** The job a text holds: JSON read here, anything else parsed as HCL. */
async function parse(text, namespace, signal) {
  const trimmed = text.trim();
  if (!trimmed) throw new Error('The job specification is empty.');
  if (trimmed.startsWith('{')) {
    let value;
    try {
      value = JSON.parse(trimmed);
    } catch (e) {
      throw new Error(`Not valid JSON: ${e.message}`);
    }
    return value.Job && typeof value.Job === 'object' ? value.Job : value;
  }
  const { data } = await request('POST', `/v1/jobs/parse?namespace=${enc(namespace)}`, {
    body: { JobHCL: text, Canonicalize: true }, signal,
  });
  return data;
}
