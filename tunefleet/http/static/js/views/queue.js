// Queue: statistics, the submit form, and the job table (filter, paging, cancel),
// updated from the live feed: progress in place, state changes by reloading the page.

import { enc, get, post, query } from '../api.js';
import { KeyedRows, badge, bar, debounce, emptyState, h } from '../dom.js';
import { fleet } from '../fleet.js';
import { ago, attemptsText, dateTime, duration, metric, ms, percentOf } from '../format.js';
import { live } from '../live.js';
import { jobHref, setParams } from '../router.js';
import { ACTIVE_JOB_STATES, JOB_STATES, TERMINAL_JOB_STATES, stateLabel } from '../states.js';
import { confirmAction, toast } from '../ui.js';
import { pageHead, pager } from './common.js';
import { submitPanel } from './submit.js';

const LIMIT = 25;
const TERMINAL = TERMINAL_JOB_STATES;
const FILTERS = [
  ['', 'All jobs'],
  ['active', `Active (${ACTIVE_JOB_STATES.join(', ')})`],
  ...JOB_STATES.map((s) => [s, stateLabel(s)]),
];
const PANEL_KEY = 'tunefleet.submitOpen';

export function waitSeconds(job, now) {
  const submitted = ms(job.submitted_at);
  if (submitted === null) return null;
  const until = ms(job.dispatched_at) ?? (job.status === 'pending' ? now : ms(job.finished_at));
  return until === null ? null : (until - submitted) / 1000;
}

export function runSeconds(job, now) {
  const started = ms(job.started_at);
  if (started === null) return null;
  const until = ms(job.finished_at) ?? (TERMINAL.has(job.status) ? null : now);
  return until === null ? null : (until - started) / 1000;
}

export function progressCell(job) {
  const pct = percentOf(job.progress);
  const p = job.progress || {};
  if (pct === null && p.step === undefined) return h('span', { class: 'faint' }, '—');
  const kind = job.status === 'completed' ? 'done' : job.status === 'failed' ? 'failed' : TERMINAL.has(job.status) ? 'muted' : '';
  const steps = p.step !== undefined ? `${p.step}${p.total ? `/${p.total}` : ''}` : '';
  const label = `Progress ${pct !== null ? `${pct.toFixed(0)}%` : ''} ${steps ? `step ${steps}` : ''}`.trim();
  return h('div', { class: 'progress-cell' },
    bar(pct ?? 0, { kind, label }),
    h('div', { class: 'meta' },
      h('span', {}, pct !== null ? `${pct.toFixed(0)}%` : ''),
      h('span', {}, [steps, typeof p.loss === 'number' ? `loss ${metric(p.loss)}` : ''].filter(Boolean).join(' · '))));
}

export function mount(main, { params }) {
  let filter = params.get('status') || '';
  let offset = Math.max(0, Number(params.get('offset')) || 0);
  let jobs = [];
  let seen = null; // job ids after the first load, to highlight new ones
  let loadSeq = 0;

  const statValues = new Map();
  const stats = h('div', { class: 'stats', role: 'group', 'aria-label': 'Queue statistics' },
    [['queue_depth', 'Queued'], ['running', 'Running'], ['completed', 'Completed'], ['failed', 'Failed'], ['avg_wait_seconds', 'Average wait']]
      .map(([key, label]) => {
        const value = h('span', { class: 'stat-value' }, '–');
        statValues.set(key, value);
        return h('div', { class: 'stat' }, h('span', { class: 'stat-label' }, label), value);
      }));

  const panel = submitPanel({
    onSubmitted: (result) => {
      if (offset !== 0 || (filter && filter !== 'active' && filter !== result.status)) {
        filter = '';
        offset = 0;
        setParams({});
      }
      reload();
    },
  });
  const panelCard = h('section', { class: 'card', id: 'submit-panel', 'aria-labelledby': 'submit-title' },
    h('div', { class: 'card-head' }, h('h2', { id: 'submit-title' }, 'Submit a job')), panel.el);
  const toggle = h('button', { class: 'btn primary', type: 'button', id: 'toggle-submit', 'aria-controls': 'submit-panel' });
  const setPanel = (open) => {
    panelCard.hidden = !open;
    toggle.setAttribute('aria-expanded', String(open));
    toggle.textContent = open ? 'Hide submit form' : '+ Submit job';
    sessionStorage.setItem(PANEL_KEY, open ? '1' : '');
  };
  toggle.addEventListener('click', () => {
    setPanel(panelCard.hidden);
    if (!panelCard.hidden) panel.focus();
  });
  setPanel(sessionStorage.getItem(PANEL_KEY) === '1');

  const statusSelect = h('select', { id: 'jf-status' }, FILTERS.map(([value, label]) => h('option', { value }, label)));
  statusSelect.value = filter;
  statusSelect.addEventListener('change', () => setParams({ status: statusSelect.value }));
  const paging = pager('jobs', (next) => setParams({ status: filter, offset: next }));
  const tbody = h('tbody');
  const table = h('table', { class: 'data', id: 'jobs-table' },
    h('caption', { class: 'sr-only' }, 'Jobs, newest first'),
    h('thead', {}, h('tr', {}, ['Job', 'Status', 'Owner', 'Progress', 'Worker', 'Attempt', 'Wait', 'Run time', 'Submitted', 'Actions']
      .map((t) => h('th', { scope: 'col' }, t === 'Actions' ? h('span', { class: 'sr-only' }, t) : t)))),
    tbody);
  const empty = h('div');
  const jobsCard = h('section', { class: 'card', 'aria-labelledby': 'jobs-title' },
    h('div', { class: 'card-head' },
      h('h2', { id: 'jobs-title' }, 'Jobs'),
      h('div', { class: 'filters' }, h('div', { class: 'field' }, h('label', { for: 'jf-status' }, 'Show'), statusSelect))),
    h('div', { class: 'table-wrap' }, table), empty,
    h('div', { class: 'card-foot' }, paging.text, paging.el));

  main.append(pageHead('Queue', 'Submitted jobs, newest first.', toggle), stats, panelCard, jobsCard);

  const now = () => Date.now();
  const rows = new KeyedRows(tbody, [
    {
      label: 'Job', sig: (j) => `${j.name}`,
      render: (j) => h('div', {},
        h('a', { href: jobHref(j.job_id), class: 'cell-title' }, j.name || j.config_name || j.job_id),
        h('div', { class: 'cell-sub' }, j.job_id)),
    },
    {
      label: 'Status', sig: (j) => `${j.status}|${j.queue_position}|${j.wait_reason}|${j.error}`,
      render: (j) => h('div', {}, badge(j.status),
        j.status === 'pending' && j.wait_reason ? h('div', { class: 'cell-note status-note', title: j.wait_reason }, j.wait_reason.length > 60 ? `${j.wait_reason.slice(0, 58)}…` : j.wait_reason) : null,
        j.status === 'failed' && j.error ? h('div', { class: 'cell-note status-note', title: j.error }, j.error.length > 60 ? `${j.error.slice(0, 58)}…` : j.error) : null),
    },
    {
      // Whose job it is: its user, and the team it was submitted for.
      label: 'Owner', sig: (j) => `${j.user}|${j.team}`,
      render: (j) => (j.user ? h('div', {}, h('span', { class: 'nowrap' }, j.user), h('div', { class: 'cell-sub' }, j.team || '—')) : h('span', { class: 'faint' }, '—')),
    },
    { label: 'Progress', sig: (j) => `${j.status}|${JSON.stringify(j.progress)}`, render: progressCell },
    {
      label: 'Worker', sig: (j) => `${j.worker_id}|${fleet.nameOf(j.worker_id)}`,
      render: (j) => (j.worker_id ? h('span', { class: 'nowrap', title: j.worker_id }, fleet.nameOf(j.worker_id)) : h('span', { class: 'faint' }, j.target === 'local' ? 'local' : '—')),
    },
    {
      label: 'Attempt', className: 'nowrap', sig: (j) => `${j.attempts}|${j.undelivered}|${j.preempted}|${j.infrastructure_failures}|${j.max_retries}`,
      render: (j) => h('span', { title: `${j.attempts} dispatch(es); up to ${j.max_retries} retr${j.max_retries === 1 ? 'y' : 'ies'}` }, attemptsText(j)),
    },
    { label: 'Wait', className: 'nowrap', sig: (j) => duration(waitSeconds(j, now())), render: (j) => duration(waitSeconds(j, now())) },
    { label: 'Run time', className: 'nowrap', sig: (j) => duration(runSeconds(j, now())), render: (j) => duration(runSeconds(j, now())) },
    {
      label: 'Submitted', className: 'nowrap', sig: (j) => ago(j.submitted_at, now()),
      render: (j) => h('span', { title: dateTime(j.submitted_at) }, ago(j.submitted_at, now())),
    },
    {
      label: 'Actions', className: 'actions', sig: (j) => `${j.status}`,
      render: (j) => (TERMINAL.has(j.status) ? null : h('button', {
        class: 'btn small danger', type: 'button', 'aria-label': `Cancel job ${j.name || j.job_id}`, onClick: () => cancel(j),
      }, 'Cancel')),
    },
  ], (j) => j.job_id);

  async function cancel(job) {
    const ok = await confirmAction({
      title: `Cancel ${job.name || job.job_id}?`,
      message: [job.status === 'pending'
        ? 'The job leaves the queue and never runs.'
        : 'The job is stopped: its trainer gets SIGTERM, then SIGKILL after a grace period.'],
      confirmLabel: 'Cancel job',
      danger: true,
    });
    if (!ok) return;
    try {
      await post(`/api/queue/${enc(job.job_id)}/cancel`, { reason: 'cancelled from the web UI' });
      toast(`Job ${job.job_id} cancelled.`, 'success');
      reload();
    } catch (error) {
      toast(error.detail, 'error');
    }
  }

  function render() {
    rows.update(jobs);
    table.hidden = jobs.length === 0;
    if (!jobs.length) {
      empty.replaceChildren(filter || offset
        ? emptyState('No jobs here', 'Try another filter or page.')
        : emptyState('No jobs yet', 'Submit one with the form above.'));
    } else {
      empty.replaceChildren();
    }
  }

  async function reload() {
    const seq = ++loadSeq;
    const status = filter === 'active' ? ACTIVE_JOB_STATES.join(',') : filter;
    try {
      const data = await get(`/api/queue${query({ status, limit: LIMIT, offset })}`);
      if (seq !== loadSeq) return;
      jobs = data.jobs;
      render();
      if (seen) {
        for (const job of jobs) {
          if (!seen.has(job.job_id)) rows.row(job.job_id)?.classList.add('flash');
        }
      }
      seen = new Set(jobs.map((j) => j.job_id));
      paging.update({ offset, limit: LIMIT, total: data.total, shown: jobs.length });
    } catch (error) {
      if (seq !== loadSeq) return;
      empty.replaceChildren(emptyState('Could not load the queue', error.detail));
    }
  }

  async function reloadStats() {
    try {
      const s = await get('/api/queue/stats');
      for (const [key, el] of statValues) {
        el.textContent = key === 'avg_wait_seconds' ? (s[key] === null ? '—' : duration(s[key])) : String(s[key]);
      }
    } catch {
      // The table shows the error; the numbers stay as they were.
    }
  }

  const reloadSoon = debounce(() => {
    reload();
    reloadStats();
  }, 300);

  const offs = [
    live.on('resync', () => reloadSoon()),
    live.on('job', (data) => {
      const job = jobs.find((j) => j.job_id === data.job_id);
      if (job) {
        Object.assign(job, {
          status: data.status ?? job.status,
          worker_id: data.worker_id !== undefined ? data.worker_id : job.worker_id,
          attempts: data.attempt ?? job.attempts,
          undelivered: data.undelivered ?? job.undelivered,
          preempted: data.preempted ?? job.preempted,
          infrastructure_failures: data.infrastructure_failures ?? job.infrastructure_failures,
          // The whole object (null once requeued): job_progress events then merge into it.
          progress: data.progress !== undefined ? data.progress : job.progress,
          error: data.error !== undefined ? data.error : job.error,
        });
        render();
      }
      // Timestamps, positions and new jobs come with the list itself.
      reloadSoon();
    }),
    live.on('job_progress', (data) => {
      const job = jobs.find((j) => j.job_id === data.job_id);
      if (job) {
        // The event holds the keys the report changed: merge them into what we hold.
        job.progress = { ...(job.progress || {}), ...data.progress };
        render();
      }
    }),
    fleet.subscribe(() => render()),
  ];
  const ticker = setInterval(render, 1000);
  reload();
  reloadStats();

  return {
    update(next) {
      filter = next.get('status') || '';
      offset = Math.max(0, Number(next.get('offset')) || 0);
      statusSelect.value = filter;
      seen = null;
      reload();
    },
    unmount() {
      offs.forEach((off) => off());
      clearInterval(ticker);
      reloadSoon.cancel();
      panel.destroy();
    },
  };
}
