// Building the DOM without innerHTML: every text from the API goes in as text, so a
// worker name or a log line can never become markup. No inline styles either (the
// page's Content-Security-Policy forbids them); sizes are set through the CSSOM.

const SVG_NS = 'http://www.w3.org/2000/svg';

function setProps(el, props) {
  for (const [key, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') el.setAttribute('class', value);
    else if (key === 'text') el.textContent = value;
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key === 'value' || key === 'checked' || key === 'selected') el[key] = value;
    else if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2).toLowerCase(), value);
    } else if (value === true) el.setAttribute(key, '');
    else el.setAttribute(key, String(value));
  }
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

/** h('button', {class: 'btn', onClick}, 'Save') */
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  append(el, children);
  // After the children, so a <select>'s value can name one of its options.
  setProps(el, props);
  return el;
}

/** Replace an element's children, skipping null/false like h() does. */
export function fill(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

export function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value !== null && value !== undefined) el.setAttribute(key, String(value));
  }
  append(el, children);
  return el;
}

/** A progress bar (0-100) whose fill width is set through the CSSOM. */
export function bar(percent, { kind = '', label = '' } = {}) {
  const fill = h('span');
  const el = h('div', { class: `bar ${kind}`.trim(), role: 'progressbar', 'aria-valuemin': 0, 'aria-valuemax': 100 }, fill);
  setBar(el, percent, label);
  return el;
}

export function setBar(el, percent, label = '') {
  const value = Number.isFinite(percent) ? Math.max(0, Math.min(100, percent)) : 0;
  el.firstChild.style.width = `${value}%`;
  el.setAttribute('aria-valuenow', String(Math.round(value)));
  if (label) el.setAttribute('aria-label', label);
}

export function badge(status, text) {
  return h('span', { class: `badge ${status}` }, text ?? status);
}

export function chips(labels) {
  const entries = Object.entries(labels || {});
  if (!entries.length) return h('span', { class: 'faint' }, '—');
  return h('span', { class: 'chips' },
    entries.map(([k, v]) => h('span', { class: 'chip', title: `${k}=${v}` }, h('span', { class: 'k' }, `${k}=`), v)));
}

export function emptyState(title, text) {
  return h('div', { class: 'empty' }, h('strong', {}, title), text ? h('p', {}, text) : null);
}

/**
 * A table body that updates rows in place, keyed by id. A cell is rebuilt only when its
 * signature changes, so a focused button survives live updates.
 * columns: [{label, className?, sig(item) -> string, render(item) -> Node|string}]
 */
export class KeyedRows {
  constructor(tbody, columns, keyOf) {
    this.tbody = tbody;
    this.columns = columns;
    this.keyOf = keyOf;
    this.rows = new Map();
  }

  update(items) {
    const seen = new Set();
    let previous = null;
    for (const item of items) {
      const key = this.keyOf(item);
      seen.add(key);
      let row = this.rows.get(key);
      if (!row) {
        row = { tr: h('tr', { dataset: { key } }), sigs: [] };
        for (const column of this.columns) {
          row.tr.append(h('td', { class: column.className, 'data-label': column.label }));
        }
        this.rows.set(key, row);
      }
      this.columns.forEach((column, i) => {
        const sig = column.sig(item);
        if (row.sigs[i] === sig) return;
        row.sigs[i] = sig;
        const cell = row.tr.children[i];
        // A rebuilt cell keeps keyboard focus on the control with the same name.
        const focused = cell.contains(document.activeElement) ? document.activeElement.getAttribute('aria-label') : null;
        cell.replaceChildren(...[column.render(item)].flat().filter((n) => n !== null && n !== undefined));
        if (focused) {
          const again = [...cell.querySelectorAll('[aria-label]')].find((el) => el.getAttribute('aria-label') === focused);
          (again ?? row.tr.querySelector('button:not([disabled])'))?.focus();
        }
      });
      const expected = previous ? previous.nextSibling : this.tbody.firstChild;
      if (expected !== row.tr) this.tbody.insertBefore(row.tr, expected);
      previous = row.tr;
    }
    for (const [key, row] of this.rows) {
      if (!seen.has(key)) {
        row.tr.remove();
        this.rows.delete(key);
      }
    }
  }

  row(key) {
    return this.rows.get(key)?.tr ?? null;
  }

  /** Forget a column's signatures so the next update re-renders it (e.g. clocks). */
  invalidate(columnIndex) {
    for (const row of this.rows.values()) row.sigs[columnIndex] = undefined;
  }
}

/**
 * Coalesces calls: the first call schedules fn `ms` later, calls until then join it.
 * Unlike a plain debounce, a steady stream of calls cannot postpone fn forever.
 */
export function debounce(fn, ms) {
  let timer = null;
  let latest = [];
  const run = (...args) => {
    latest = args;
    if (timer !== null) return;
    timer = setTimeout(() => {
      timer = null;
      fn(...latest);
    }, ms);
  };
  run.cancel = () => {
    clearTimeout(timer);
    timer = null;
  };
  return run;
}

/** Coalesces calls into one per animation frame. */
export function perFrame(fn) {
  let queued = false;
  return () => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => {
      queued = false;
      fn();
    });
  };
}
