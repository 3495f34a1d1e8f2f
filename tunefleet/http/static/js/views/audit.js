// Audit: the hash-chain verification and the events, filtered and paged. The audit
// log has no live feed of its own; fleet and job changes (which it records) trigger a
// reload of the first page.

import { get, query } from '../api.js';
import { KeyedRows, badge, debounce, emptyState, h } from '../dom.js';
import { ago, dateTime } from '../format.js';
import { live } from '../live.js';
import { session } from '../session.js';
import { setParams } from '../router.js';
import { pageHead, pager, permissionNote } from './common.js';

const LIMIT = 50;
const FILTER_FIELDS = [
  ['kind', 'Kind', 'worker.created'],
  ['actor', 'Actor', 'token:admin#1'],
  ['target', 'Target', 'w_… or j_…'],
  ['outcome', 'Outcome', 'success, denied…'],
];

function outcomeClass(outcome) {
  if (!outcome) return 'plain';
  if (/^(ok|success)$/.test(outcome)) return 'success';
  if (/denied|fail|error/.test(outcome)) return 'failed';
  return 'plain';
}

/** A datetime-local value (local time) as ISO 8601 UTC for the API, or ''. */
function localToIso(value) {
  if (!value) return '';
  const t = new Date(value);
  return Number.isNaN(t.getTime()) ? '' : t.toISOString();
}

function isoToLocal(value) {
  const t = value ? new Date(value) : null;
  if (!t || Number.isNaN(t.getTime())) return '';
  const local = new Date(t.getTime() - t.getTimezoneOffset() * 60000);
  return local.toISOString().slice(0, 16);
}

function detailText(detail) {
  const entries = Object.entries(detail || {}).filter(([, v]) => v !== null && v !== undefined && v !== '');
  if (!entries.length) return h('span', { class: 'faint' }, '—');
  return h('div', { class: 'detail-kv' }, entries.map(([k, v], i) => [
    i ? ', ' : '', `${k}=`, h('b', {}, typeof v === 'string' ? v : JSON.stringify(v)),
  ]));
}

export function mount(main, { params }) {
  let filters = Object.fromEntries(['kind', 'actor', 'target', 'outcome', 'since', 'until'].map((k) => [k, params.get(k) || '']));
  let offset = Math.max(0, Number(params.get('offset')) || 0);
  let loadSeq = 0;

  const verifyBox = h('div', { class: 'verify', id: 'audit-verify' }, h('span', { class: 'muted' }, 'Verifying the hash chain…'));
  const verifyButton = h('button', { class: 'btn small', type: 'button' }, 'Verify again');
  const inputs = {};
  const form = h('form', { class: 'filters', 'aria-label': 'Filter audit events' },
    FILTER_FIELDS.map(([key, label, placeholder]) => {
      inputs[key] = h('input', { id: `af-${key}`, type: 'text', value: filters[key], placeholder, autocomplete: 'off', spellcheck: 'false' });
      return h('div', { class: 'field' }, h('label', { for: `af-${key}` }, label), inputs[key]);
    }),
    [['since', 'Since'], ['until', 'Until']].map(([key, label]) => {
      inputs[key] = h('input', { id: `af-${key}`, type: 'datetime-local', value: isoToLocal(filters[key]) });
      return h('div', { class: 'field' }, h('label', { for: `af-${key}` }, label), inputs[key]);
    }),
    h('div', { class: 'btn-row' },
      h('button', { class: 'btn primary', type: 'submit' }, 'Apply'),
      h('button', { class: 'btn', type: 'reset' }, 'Clear')));

  const paging = pager('audit events', (next) => setParams({ ...filters, offset: next }));
  const tbody = h('tbody');
  const table = h('table', { class: 'data', id: 'audit-table' },
    h('caption', { class: 'sr-only' }, 'Audit events, newest first'),
    h('thead', {}, h('tr', {}, ['#', 'Time', 'Kind', 'Actor', 'Target', 'Outcome', 'From', 'Detail'].map((t) => h('th', { scope: 'col' }, t)))),
    tbody);
  const empty = h('div');
  const content = h('div', {},
    h('section', { class: 'card', 'aria-label': 'Hash chain' }, h('div', { class: 'card-body' }, verifyBox)),
    h('section', { class: 'card', 'aria-label': 'Audit events' },
      h('div', { class: 'card-head' }, form),
      h('div', { class: 'table-wrap' }, table), empty,
      h('div', { class: 'card-foot' }, paging.text, paging.el)));
  main.append(pageHead('Audit', 'Who did what, when: a tamper-evident, hash-chained record.'), content);

  const rows = new KeyedRows(tbody, [
    { label: '#', className: 'num', sig: (e) => String(e.id), render: (e) => h('span', { class: 'mono', title: `hash ${e.hash}` }, String(e.id)) },
    { label: 'Time', className: 'nowrap', sig: (e) => e.at, render: (e) => h('span', { title: ago(e.at) }, dateTime(e.at)) },
    { label: 'Kind', sig: (e) => e.kind, render: (e) => h('span', { class: 'mono' }, e.kind) },
    { label: 'Actor', sig: (e) => `${e.actor}`, render: (e) => e.actor || h('span', { class: 'faint' }, '—') },
    { label: 'Target', sig: (e) => `${e.target}`, render: (e) => (e.target ? h('span', { class: 'mono' }, e.target) : h('span', { class: 'faint' }, '—')) },
    { label: 'Outcome', sig: (e) => `${e.outcome}`, render: (e) => (e.outcome ? badge(outcomeClass(e.outcome), e.outcome) : '—') },
    { label: 'From', sig: (e) => `${e.client_address}`, render: (e) => e.client_address || h('span', { class: 'faint' }, '—') },
    { label: 'Detail', sig: (e) => JSON.stringify(e.detail), render: (e) => detailText(e.detail) },
  ], (e) => String(e.id));

  async function verify() {
    verifyButton.disabled = true;
    try {
      const result = await get('/api/audit/verify');
      verifyBox.replaceChildren(result.ok
        ? h('div', { class: 'callout ok', role: 'status' }, h('div', {}, h('strong', {}, 'Hash chain intact. '),
          'Every event links to the one before it; nothing was changed or removed.'))
        : h('div', { class: 'callout danger', role: 'alert' }, h('div', {}, h('strong', {}, `Hash chain broken at event #${result.first_bad_id}. `),
          'That event or one before it was changed or removed after it was written.')),
      verifyButton);
    } catch (error) {
      if (error.status === 403) {
        content.replaceChildren(permissionNote('audit.read', 'read the audit log'));
        return;
      }
      verifyBox.replaceChildren(h('span', { class: 'muted' }, `Could not verify: ${error.detail}`), verifyButton);
    } finally {
      verifyButton.disabled = false;
    }
  }

  async function reload() {
    const seq = ++loadSeq;
    try {
      const data = await get(`/api/audit${query({ ...filters, limit: LIMIT, offset })}`);
      if (seq !== loadSeq) return;
      rows.update(data.events);
      table.hidden = data.events.length === 0;
      empty.replaceChildren(data.events.length ? '' : emptyState('No audit events match', 'Change or clear the filters.'));
      paging.update({ offset, limit: LIMIT, total: null, shown: data.events.length, hasMore: data.total > offset + LIMIT });
    } catch (error) {
      if (seq !== loadSeq) return;
      if (error.status === 403) {
        content.replaceChildren(permissionNote('audit.read', 'read the audit log'));
        return;
      }
      table.hidden = true;
      empty.replaceChildren(emptyState('Could not load the audit log', error.detail));
    }
  }

  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const next = {};
    for (const [key] of FILTER_FIELDS) next[key] = inputs[key].value.trim();
    next.since = localToIso(inputs.since.value);
    next.until = localToIso(inputs.until.value);
    setParams(next);
  });
  form.addEventListener('reset', () => setTimeout(() => setParams({}), 0));
  verifyButton.addEventListener('click', verify);

  const reloadSoon = debounce(() => offset === 0 && reload(), 1000);
  // Only a change of state is audited, not every update of a worker (utilisation, …).
  const workerStates = new Map();
  const onWorker = ({ worker }) => {
    const state = worker && `${worker.status}|${worker.drain_requested}|${worker.connected}`;
    if (!worker || workerStates.get(worker.worker_id) === state) return;
    workerStates.set(worker.worker_id, state);
    reloadSoon();
  };
  const offs = [
    live.on('resync', () => reloadSoon()),
    live.on('worker', onWorker),
    live.on('worker_deleted', reloadSoon),
    live.on('job', reloadSoon),
  ];
  if (!session.may('audit.read')) {
    content.replaceChildren(permissionNote('audit.read', 'read the audit log'));
  } else {
    // The list first (quick), then the verification, which reads the whole chain; and
    // one refusal, not two, for a token without audit.read.
    reload().then(() => session.may('audit.read') && verify());
  }

  return {
    update(next) {
      filters = Object.fromEntries(Object.keys(filters).map((k) => [k, next.get(k) || '']));
      offset = Math.max(0, Number(next.get('offset')) || 0);
      for (const [key] of FILTER_FIELDS) inputs[key].value = filters[key];
      inputs.since.value = isoToLocal(filters.since);
      inputs.until.value = isoToLocal(filters.until);
      reload();
    },
    unmount() {
      offs.forEach((off) => off());
      reloadSoon.cancel();
    },
  };
}
