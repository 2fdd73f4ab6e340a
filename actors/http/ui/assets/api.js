// The UI's one way to the agent: herder's public /v1/ API, with the ACL
// token the user gave (kept in localStorage, sent as X-Nomad-Token), and
// Nomad's blocking queries for live views.

const TOKEN_KEY = 'herder.acl-token';
/** How long one blocking query parks on the server, unless told. */
const WAIT = '60s';

export function token() {
  try { return localStorage.getItem(TOKEN_KEY) || ''; } catch { return ''; }
}

export function setToken(secret) {
  try {
    if (secret) localStorage.setItem(TOKEN_KEY, secret);
    else localStorage.removeItem(TOKEN_KEY);
  } catch { /* storage refused (private mode): the token lasts this page */ }
}

/** An answer other than 2xx: its status and the server's text. */
export class ApiError extends Error {
  constructor(status, text, path) {
    super(text ? `${text} (${status})` : `HTTP ${status} on ${path}`);
    this.status = status;
    this.text = text;
  }
}

/** One request; answers {data, index} (index: X-Nomad-Index, 0 if none).
 *  A 403 also tells the page (event `herder:forbidden`) to ask for a token. */
export async function request(method, path, { body, signal } = {}) {
  const headers = {};
  const secret = token();
  if (secret) headers['X-Nomad-Token'] = secret;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, {
    method, headers, signal,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!res.ok) {
    const text = (await res.text()).trim();
    if (res.status === 403) {
      window.dispatchEvent(new CustomEvent('herder:forbidden', { detail: text }));
    }
    throw new ApiError(res.status, text, path);
  }
  const index = Number(res.headers.get('X-Nomad-Index')) || 0;
  const type = res.headers.get('Content-Type') || '';
  const data = type.includes('json') ? await res.json() : await res.text();
  return { data, index };
}

export const get = (path, opts) => request('GET', path, opts).then((r) => r.data);
export const put = (path, body, opts) => request('PUT', path, { ...opts, body: body ?? {} }).then((r) => r.data);
export const del = (path, opts) => request('DELETE', path, opts).then((r) => r.data);

/** Waits `ms`, or less if `signal` aborts. */
export function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => { clearTimeout(timer); resolve(); }, { once: true });
  });
}

/**
 * Keeps `path` live with blocking queries: the first read answers at
 * once, each next one parks on the server (`?index=N&wait=60s`) until the
 * answer's `X-Nomad-Index` passes N. One request in flight at a time, and
 * `onData` runs only when the index moved. Ends when `signal` aborts.
 * Errors are reported through `onError` and retried with a growing pause
 * (at most 30 s), so a down agent costs one request per pause.
 * `onIdle` runs when a wait ran out with nothing new (`wait` long), for a
 * page that also shows something this query does not watch.
 */
export async function watch(path, onData, { signal, onError, onIdle, wait = WAIT, everyMs = 2000 } = {}) {
  let index = 0;
  let failures = 0;
  const sep = path.includes('?') ? '&' : '?';
  while (!signal?.aborted) {
    const url = index ? `${path}${sep}index=${index}&wait=${wait}` : path;
    let answer;
    try {
      answer = await request('GET', url, { signal });
      failures = 0;
    } catch (e) {
      if (signal?.aborted) return;
      failures += 1;
      onError?.(e);
      await sleep(Math.min(30000, 500 * 2 ** failures), signal);
      continue;
    }
    if (index && answer.index === index) { // the wait ran out
      try { await onIdle?.(); } catch (e) { if (!signal?.aborted) onError?.(e); }
      continue;
    }
    try {
      await onData(answer.data, answer.index);
    } catch (e) {
      if (signal?.aborted) return;
      onError?.(e);
    }
    // An index that went back (a restored store) starts over from it.
    index = answer.index;
    // An answer without an index cannot block: read again after a pause.
    if (!index) await sleep(everyMs, signal);
  }
}

/** `encodeURIComponent`, for path segments and query values. */
export const enc = encodeURIComponent;
