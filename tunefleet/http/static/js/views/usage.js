// Usage: GPU-hours per team (or user) per UTC day, a chart per team, a table, the
// teams' budgets and a CSV download. Derived from attempts by the server (GET /api/usage);
// reloaded when jobs change.

import { download, get, query } from '../api.js';
import { KeyedRows, badge, debounce, emptyState, h } from '../dom.js';
import { dateTime } from '../format.js';
import { live } from '../live.js';
import { setParams } from '../router.js';
import { daysBetween, gpuHours, usageChart } from '../usage_chart.js';
import { pageHead } from './common.js';

function budgetNote(b) {
  const kind = b.spent ? (b.action === 'block' ? 'danger' : 'warn') : 'ok';
  const state = b.spent
    ? (b.action === 'block' ? 'spent: submits are refused' : 'spent: submits go through with a warning')
    : 'within budget';
  return h('div', { class: `callout ${kind}`, role: 'status', dataset: { team: b.team } },
    h('div', {}, h('strong', {}, `Team ${b.team}: `),
      `${b.used_gpu_hours.toFixed(2)} of ${b.gpu_hours} GPU-hours per ${b.period} used, ${state}; `
      + `renews ${dateTime(b.renews_at)}.`));
}

export function mount(main, { params }) {
  let filters = { by: params.get('by') || 'team', since: params.get('since') || '', until: params.get('until') || '' };
  let loadSeq = 0;

  const inputs = {
    by: h('select', { id: 'uf-by' }, h('option', { value: 'team' }, 'Team'), h('option', { value: 'user' }, 'User')),
    since: h('input', { id: 'uf-since', type: 'date', value: filters.since }),
    until: h('input', { id: 'uf-until', type: 'date', value: filters.until }),
  };
  inputs.by.value = filters.by;
  const csvButton = h('button', { class: 'btn', type: 'button', id: 'usage-csv' }, 'Download CSV');
  const form = h('form', { class: 'filters', 'aria-label': 'Usage window' },
    [['by', 'Sum per'], ['since', 'Since (UTC day)'], ['until', 'Until (UTC day)']].map(([key, label]) => h('div', { class: 'field' }, h('label', { for: `uf-${key}` }, label), inputs[key])),
    h('div', { class: 'btn-row' }, h('button', { class: 'btn primary', type: 'submit' }, 'Apply'), csvButton));
  const summary = h('p', { class: 'muted', id: 'usage-summary', 'aria-live': 'polite' });
  const budgets = h('div', { id: 'usage-budgets' });
  const charts = h('div', { class: 'charts', id: 'usage-charts' });
  const tbody = h('tbody');
  const nameHead = h('th', { scope: 'col' }, 'Team');
  const table = h('table', { class: 'data', id: 'usage-table' },
    h('caption', { class: 'sr-only' }, 'GPU-hours per day'),
    h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Day'), nameHead,
      h('th', { scope: 'col', class: 'num' }, 'GPU-hours'), h('th', { scope: 'col', class: 'num' }, 'Attempts'))),
    tbody);
  const empty = h('div');
  main.append(
    pageHead('Usage', 'GPU-hours burned per day (UTC): every attempt\'s GPUs × time, failed and preempted ones too.'),
    h('section', { class: 'card', 'aria-label': 'Usage' },
      h('div', { class: 'card-head' }, form),
      h('div', { class: 'card-body' }, budgets, summary, charts)),
    h('section', { class: 'card', 'aria-label': 'Usage per day' }, h('div', { class: 'table-wrap' }, table), empty));

  const rows = new KeyedRows(tbody, [
    { label: 'Day', className: 'nowrap', sig: (r) => r.day, render: (r) => r.day },
    { label: 'Name', sig: (r) => r.name, render: (r) => r.name },
    { label: 'GPU-hours', className: 'num', sig: (r) => String(r.gpu_hours), render: (r) => gpuHours(r.gpu_hours) },
    { label: 'Attempts', className: 'num', sig: (r) => String(r.attempts), render: (r) => String(r.attempts) },
  ], (r) => `${r.day}|${r.name}`);

  function apiQuery(extra = {}) {
    const q = { by: filters.by, ...extra };
    if (filters.since) q.since = filters.since;
    if (filters.until) q.until = filters.until;
    return query(q);
  }

  async function reload() {
    const seq = ++loadSeq;
    try {
      const data = await get(`/api/usage${apiQuery()}`);
      if (seq !== loadSeq) return;
      nameHead.textContent = data.by === 'user' ? 'User' : 'Team';
      budgets.replaceChildren(...data.budgets.map(budgetNote));
      const total = data.total_gpu_seconds / 3600;
      summary.textContent = `${gpuHours(total)} GPU-hours from ${dateTime(data.since)} to ${dateTime(data.until)}.`;
      const days = daysBetween(data.since, data.until);
      const perName = new Map();
      for (const r of data.rows) {
        if (!perName.has(r.name)) perName.set(r.name, {});
        perName.get(r.name)[r.day] = r.gpu_hours;
      }
      charts.replaceChildren(...[...perName].map(([name, hours]) => usageChart(name, days, hours)));
      rows.update([...data.rows].reverse());
      table.hidden = data.rows.length === 0;
      empty.replaceChildren(data.rows.length ? '' : emptyState('No GPU usage in this window', 'Widen the window, or run a job.'));
    } catch (error) {
      if (seq !== loadSeq) return;
      table.hidden = true;
      charts.replaceChildren();
      empty.replaceChildren(emptyState('Could not load usage', error.detail));
    }
  }

  form.addEventListener('submit', (event) => {
    event.preventDefault();
    setParams({ by: inputs.by.value, since: inputs.since.value, until: inputs.until.value });
  });
  csvButton.addEventListener('click', async () => {
    csvButton.disabled = true;
    try {
      await download(`/api/usage${apiQuery({ format: 'csv' })}`, `usage-${filters.by}.csv`);
    } catch (error) {
      empty.replaceChildren(emptyState('Could not download the CSV', error.detail));
    } finally {
      csvButton.disabled = false;
    }
  });

  const reloadSoon = debounce(reload, 2000);
  const offs = [live.on('resync', reloadSoon), live.on('job', reloadSoon)];
  reload();

  return {
    update(next) {
      filters = { by: next.get('by') || 'team', since: next.get('since') || '', until: next.get('until') || '' };
      inputs.by.value = filters.by;
      inputs.since.value = filters.since;
      inputs.until.value = filters.until;
      reload();
    },
    unmount() {
      offs.forEach((off) => off());
      reloadSoon.cancel();
    },
  };
}
