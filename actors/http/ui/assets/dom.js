// Building DOM nodes from data: text goes in as text (never as HTML), so
// whatever a job or node name holds, it cannot become markup.

/** An element: `attrs` keys starting with `on` are listeners; `true` sets
 *  a boolean attribute, `false`/null/undefined leaves it out. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === false || value === null || value === undefined) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2), value);
    } else if (key === 'value') {
      el.value = value;
    } else {
      el.setAttribute(key, value === true ? '' : String(value));
    }
  }
  append(el, children);
  return el;
}

/** Appends strings, numbers, nodes and (nested) arrays of them. */
export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

/** Replaces `el`'s children. */
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** A table: `columns` are [heading, cell(row), {num}] triples; `rowAttrs`
 *  gives each row's attributes (a data- key for tests and links). */
export function table({ caption, columns, rows, empty, id, rowAttrs }) {
  const head = h('thead', null, h('tr', null, columns.map(([title, , opts]) =>
    h('th', { scope: 'col', class: opts && opts.num ? 'num' : null }, title))));
  const body = h('tbody');
  if (rows.length === 0) {
    body.append(h('tr', null, h('td', { colspan: columns.length, class: 'empty' }, empty || 'None')));
  }
  const fragment = document.createDocumentFragment();
  for (const row of rows) {
    fragment.append(h('tr', rowAttrs ? rowAttrs(row) : null, columns.map(([, cell, opts]) =>
      h('td', { class: opts && opts.num ? 'num' : null }, cell(row)))));
  }
  body.append(fragment);
  return h('table', { id }, caption ? h('caption', null, caption) : null, head, body);
}

/** One page of `rows` (`page` from 0, `size` rows) and the controls to
 *  move between pages: a list of 10,000 clients draws one page of rows,
 *  not all of them, each time it is re-read. `onPage(n)` redraws page n. */
export function paged(rows, page, size, onPage) {
  const pages = Math.max(1, Math.ceil(rows.length / size));
  const at = Math.min(Math.max(0, page), pages - 1);
  const first = at * size;
  const shown = rows.slice(first, first + size);
  if (pages === 1) return { rows: shown, nav: null };
  const go = (n) => h('button', { type: 'button', disabled: n < 0 || n >= pages, onclick: () => onPage(n) },
    n < at ? 'Previous page' : 'Next page');
  const nav = h('nav', { class: 'pager', 'aria-label': 'Pages' },
    go(at - 1),
    h('span', { 'aria-live': 'polite' }, ` rows ${first + 1}–${first + shown.length} of ${rows.length} (page ${at + 1} of ${pages}) `),
    go(at + 1));
  return { rows: shown, nav };
}

/** A labelled form field: the label is tied to the control by its id. */
export function field(label, control) {
  return h('div', { class: 'field' }, h('label', { for: control.id }, label), control);
}

/** A definition list of [term, value] pairs, shown as a row of facts. */
export function facts(pairs) {
  return h('dl', { class: 'meta' }, pairs.map(([term, value]) =>
    h('div', null, h('dt', null, term), h('dd', null, value))));
}

/** Confirm buttons waiting for their second click, by page and key, with
 *  when they were first clicked. Live sections redraw when the cluster
 *  changes; a button redrawn while it waits is drawn waiting again, so a
 *  refresh does not swallow an action the user is halfway through. */
const asking = new Map();
const ASK_FOR_MS = 60_000;

/** A button that asks once more before it acts (no modal dialog).
 *  `key` names what it acts on (a deployment's ID, a job's version): a
 *  redraw for the same key keeps the question open, a different key (the
 *  job changed under the user) asks afresh. */
export function confirmButton(label, confirmLabel, action, cls = 'danger', key = confirmLabel) {
  const id = `${location.pathname}|${key}`;
  const wrap = h('span', { class: 'confirm' });
  const settle = () => { asking.delete(id); replace(wrap, first); };
  const ask = () => replace(wrap,
    h('button', { type: 'button', class: cls, onclick: async (e) => {
      // Answered: a redraw while the action runs shows the first button.
      asking.delete(id);
      e.target.disabled = true;
      try { await action(); } finally { settle(); }
    } }, confirmLabel),
    h('button', { type: 'button', onclick: () => { settle(); first.focus(); } }, 'Cancel'));
  const first = h('button', { type: 'button', onclick: () => {
    asking.set(id, Date.now());
    ask();
    wrap.querySelector('button').focus();
  } }, label);
  const since = asking.get(id);
  if (since !== undefined && Date.now() - since < ASK_FOR_MS) {
    ask();
  } else {
    asking.delete(id);
    wrap.append(first);
  }
  return wrap;
}

const shown = new WeakMap();
/** Redraws `el` from `build()` only when `data` differs from what it was
 *  last drawn from: a refresh that brings nothing new leaves the section
 *  (and a half-clicked confirm button in it) alone. */
export function replaceIfChanged(el, data, build) {
  const key = JSON.stringify(data ?? null);
  if (shown.get(el) === key) return false;
  shown.set(el, key);
  replace(el, build());
  return true;
}
