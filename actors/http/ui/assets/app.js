// The UI's shell: the router (paths under /ui/, history API, no page
// reloads), one page view at a time with its own AbortSignal (leaving a
// view ends its blocking queries and streams), the ACL token panel, and
// the notice line for errors.
import { setToken, token } from './api.js';
import { replace, h } from './dom.js';
import * as jobs from './pages/jobs.js';
import * as job from './pages/job.js';
import * as run from './pages/run.js';
import * as alloc from './pages/alloc.js';
import * as nodes from './pages/nodes.js';
import * as node from './pages/node.js';
import * as servers from './pages/servers.js';
import * as evals from './pages/evals.js';
import * as topology from './pages/topology.js';

/** [pattern, page module, nav section]; the first match wins. */
const ROUTES = [
  [/^\/ui\/?$/, jobs, 'jobs'],
  [/^\/ui\/jobs\/?$/, jobs, 'jobs'],
  [/^\/ui\/jobs\/run\/?$/, run, 'jobs'],
  [/^\/ui\/jobs\/([^/]+)\/([^/]+)\/?$/, job, 'jobs'],
  [/^\/ui\/allocations\/([^/]+)\/?$/, alloc, 'jobs'],
  [/^\/ui\/nodes\/?$/, nodes, 'nodes'],
  [/^\/ui\/nodes\/([^/]+)\/?$/, node, 'nodes'],
  [/^\/ui\/servers\/?$/, servers, 'servers'],
  [/^\/ui\/evaluations\/?$/, { render: evals.renderList }, 'evaluations'],
  [/^\/ui\/evaluations\/([^/]+)\/?$/, evals, 'evaluations'],
  [/^\/ui\/topology\/?$/, topology, 'topology'],
];

const main = document.getElementById('main');
const notice = document.getElementById('notice');
let view = null;

/** Shows a message in the notice line (errors unless `info`). */
export function say(message, info = false) {
  notice.textContent = message || '';
  notice.className = info ? 'notice info' : 'notice';
}

/** Goes to `path` inside the UI without reloading the page. */
export function navigate(path, { replaceState = false } = {}) {
  if (replaceState) history.replaceState(null, '', path);
  else history.pushState(null, '', path);
  render();
}

/** Renders the view of the current location, ending the previous one. */
function render() {
  view?.abort();
  view = new AbortController();
  say('');
  const path = decodeURI(location.pathname);
  const match = ROUTES.map(([re, page, section]) => [path.match(re), page, section]).find(([m]) => m);
  for (const link of document.querySelectorAll('[data-nav]')) {
    if (match && link.dataset.nav === match[2]) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  const ctx = {
    signal: view.signal,
    query: new URLSearchParams(location.search),
    navigate,
    say,
  };
  if (!match) {
    replace(main, h('h1', { tabindex: -1 }, 'Not found'), h('p', null, `No page at ${path}. `, h('a', { href: '/ui/jobs' }, 'Go to the jobs.')));
    return;
  }
  const [m, page] = match;
  replace(main);
  Promise.resolve(page.render(main, m.slice(1).map(decodeURIComponent), ctx)).catch((e) => {
    if (!ctx.signal.aborted) say(e.message || String(e));
  });
  main.querySelector('h1')?.focus({ preventScroll: true });
}

/** Same-origin links into /ui/ navigate in place (plain clicks only). */
document.addEventListener('click', (e) => {
  const link = e.target.closest && e.target.closest('a[href]');
  if (!link || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  // An SVG link's href and target are not strings: read the attributes.
  const url = new URL(link.getAttribute('href'), location.href);
  if (url.origin !== location.origin || !url.pathname.startsWith('/ui/') || link.getAttribute('target')) return;
  e.preventDefault();
  navigate(url.pathname + url.search);
});
window.addEventListener('popstate', render);

// The token panel: opened by its button, or by any 403 from the API.
const panel = document.getElementById('token-panel');
const toggle = document.getElementById('token-toggle');
const secret = document.getElementById('token-secret');
const reason = document.getElementById('token-reason');
function showPanel(open, why = '') {
  const opening = open && panel.hidden;
  panel.hidden = !open;
  toggle.setAttribute('aria-expanded', String(open));
  reason.textContent = why;
  // A retried query refusing again must not reset what is being typed.
  if (opening) { secret.value = token(); secret.focus(); }
}
toggle.addEventListener('click', () => showPanel(panel.hidden));
window.addEventListener('herder:forbidden', (e) => {
  showPanel(true, `The API refused the request: ${e.detail || 'Permission denied'}. ${token() ? 'This token lacks the permission.' : 'Enter an ACL token.'}`);
});
document.getElementById('token-form').addEventListener('submit', (e) => {
  e.preventDefault();
  setToken(secret.value.trim());
  showPanel(false);
  render();
});
document.getElementById('token-clear').addEventListener('click', () => {
  setToken('');
  secret.value = '';
  showPanel(false);
  render();
});

render();
