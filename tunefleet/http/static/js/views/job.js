// One job: status, facts, timeline, progress with metric charts, and the live log tail.

import { download, enc, get, post, query } from '../api.js';
import { badge, bar, chips, debounce, h, perFrame, setBar } from '../dom.js';
import { chartPanel } from '../chart.js';
import { gpuHours } from '../usage_chart.js';
import { fleet } from '../fleet.js';
import { ago, attemptsText, dateTime, duration, gb, metric, percentOf } from '../format.js';
import { live } from '../live.js';
import { MAX_LIVE_POINTS, MetricHistory } from '../metrics.js';
import { session } from '../session.js';
import { TERMINAL_JOB_STATES } from '../states.js';
import { confirmAction, toast } from '../ui.js';
import { artifactsPanel } from './job_artifacts.js';
import { logPanel } from './job_logs.js';
import { runSeconds, waitSeconds } from './queue.js';

const TERMINAL = TERMINAL_JOB_STATES;
const HIDDEN_PROGRESS = new Set(['step', 'total', 'percent']);
const METRICS_PAGE = 10000; // the API's default (and largest) page

function workerLabel(id) {
  return id ? fleet.nameOf(id) : '—';
}

/** An attempt's end, with its kind first (job_error, infrastructure, ...: issue 26). */
function withKind(entry, note) {
  const kind = entry.detail?.kind;
  if (!kind) return note;
  const label = kind.replace('_', ' ');
  return note ? `${label} · ${note}` : label;
}

/** The timeline as people read it: each entry's title and the line under it. */
export function describeEvent(entry) {
  const worker = entry.worker_id ? fleet.nameOf(entry.worker_id) : null;
  const attempt = entry.attempt ? `attempt ${entry.attempt}` : '';
  const reason = entry.detail?.reason ?? null;
  switch (entry.kind) {
    case 'submitted':
      return { title: 'Submitted', note: [entry.detail?.by && `by ${entry.detail.by}`, entry.detail?.target && `target ${entry.detail.target}`].filter(Boolean).join(', ') };
    case 'dispatched':
      return { title: `Dispatched to ${worker ?? 'a worker'}`, note: attempt };
    case 'started':
      return { title: `Running on ${worker ?? 'a worker'}`, note: attempt ? `${attempt} acknowledged` : '' };
    case 'requeued':
      return { title: `Requeued from ${worker ?? 'its worker'}`, note: withKind(entry, reason ?? attempt), bad: true };
    case 'stop_requested':
      return { title: entry.detail?.preempt ? 'Preemption asked' : 'Stop asked', note: reason ?? attempt };
    case 'preempted':
      // Requeued at the head of its priority band; the next attempt's "resumed from
      // checkpoint-N" entry says where it picked up. Its kind is always preempted: it
      // spends neither a retry nor the infrastructure budget.
      return { title: `Preempted on ${worker ?? 'its worker'}`, note: [reason, attempt && `${attempt} spent no retry`].filter(Boolean).join(' · '), bad: true };
    case 'completed':
      return { title: 'Completed', note: worker ? `on ${worker}` : '' };
    case 'failed':
      return { title: 'Failed', note: withKind(entry, reason ?? ''), bad: true };
    case 'cancelled':
      return { title: 'Cancelled', note: reason ?? '' };
    case 'resumed':
    case 'checkpoint_stored':
    case 'artifacts_stored':
      return { title: entry.detail?.message ?? entry.kind, note: attempt };
    case 'budget.warning':
      return { title: 'Submitted past its team\'s GPU-hour budget (warn)', note: entry.detail?.message ?? '', bad: true };
    case 'artifacts_not_stored':
      return { title: 'Artifacts not stored', note: reason ?? '', bad: true };
    default:
      return { title: entry.detail?.message ?? entry.kind, note: reason ?? '' };
  }
}

export function mount(main, { args }) {
  const jobId = args[0];
  let job = null;
  const history = new MetricHistory();
  const charts = new Map();

  const title = h('h1', {}, jobId);
  const statusHolder = h('span');
  const subtitle = h('p', { class: 'subtitle mono' }, jobId);
  const cancelButton = h('button', { class: 'btn danger', type: 'button', hidden: true }, 'Cancel job');
  const preemptButton = h('button', { class: 'btn', type: 'button', hidden: true, title: 'Stop this attempt and queue the job again; it resumes from its newest checkpoint' }, 'Preempt');
  const facts = h('dl', { class: 'facts' });
  const pctText = h('span', { class: 'pct', id: 'job-percent' }, '—');
  const stepText = h('span', { class: 'muted' });
  const bigBar = bar(0, { label: 'Job progress' });
  const metricsNow = h('div', { class: 'metrics-now' });
  const chartsBox = h('div', { class: 'charts', id: 'job-charts' });
  const chartsNote = h('p', { class: 'muted' }, 'Metrics appear here as the trainer reports them.');
  const csvButton = h('button', { class: 'btn small', type: 'button', hidden: true, title: 'Every stored point, one column per metric' }, 'Download CSV');
  const timeline = h('ol', { class: 'timeline', id: 'job-timeline', 'aria-label': 'Timeline' });
  const requirements = h('dl', { class: 'facts' });
  const configBox = h('div', { class: 'card-body' });
  const notice = h('div', { class: 'notice' });

  const logs = logPanel(jobId, { onEnd: () => reloadSoon() });
  const artifacts = artifactsPanel(jobId);

  main.append(
    h('p', {}, h('a', { href: '#/queue' }, '← Queue')),
    h('div', { class: 'page-head' },
      h('div', {}, h('div', { class: 'job-head' }, title, statusHolder), subtitle),
      h('div', { class: 'actions' }, preemptButton, cancelButton)),
    notice,
    h('section', { class: 'card', 'aria-label': 'Summary' }, facts),
    h('div', { class: 'grid-main-side' },
      h('div', { class: 'stack' },
        h('section', { class: 'card', 'aria-labelledby': 'progress-title' },
          h('div', { class: 'card-head' }, h('h2', { id: 'progress-title' }, 'Progress'), metricsNow, csvButton),
          h('div', { class: 'card-body stack' },
            h('div', { class: 'big-progress' }, h('div', { class: 'meta' }, pctText, stepText), bigBar),
            chartsNote, chartsBox)),
        artifacts.el,
        h('section', { class: 'card', 'aria-labelledby': 'log-title' }, logs.el)),
      h('div', { class: 'stack' },
        h('section', { class: 'card', 'aria-labelledby': 'timeline-title' },
          h('div', { class: 'card-head' }, h('h2', { id: 'timeline-title' }, 'Timeline')),
          h('div', { class: 'card-body' }, timeline)),
        h('section', { class: 'card', 'aria-labelledby': 'req-title' },
          h('div', { class: 'card-head' }, h('h2', { id: 'req-title' }, 'Requirements')), requirements),
        h('section', { class: 'card', 'aria-label': 'Configuration' }, configBox))),
  );

  const fact = (label, value, extra = {}) => h('div', { class: 'fact' }, h('dt', {}, label), h('dd', extra, value));

  // The run time, and the GPU time of every attempt (GPUs held x time, failed ones too,
  // as the server counted it) when the job held any: in the same fact, so the strip
  // keeps its eight.
  function runText(j, now) {
    const gpuSeconds = (j.attempt_history || []).reduce((sum, a) => sum + (a.gpu_seconds || 0), 0);
    const run = duration(runSeconds(j, now));
    return gpuSeconds > 0 ? `${run} · ${gpuHours(gpuSeconds / 3600)} GPU-h` : run;
  }

  function renderFacts(now = Date.now()) {
    facts.replaceChildren(
      fact('Status', job.status),
      fact('Worker', workerLabel(job.worker_id), { title: job.worker_id ?? '' }),
      fact('Attempt', attemptsText(job, 'of')),
      fact('Waited', duration(waitSeconds(job, now))),
      fact('Run time', runText(job, now)),
      fact('Submitted', ago(job.submitted_at, now), { title: dateTime(job.submitted_at) }),
      fact('Priority', String(job.priority)),
      fact('Target', job.target),
    );
  }

  function renderHead() {
    title.textContent = job.name || job.config_name || job.job_id;
    document.title = `${title.textContent} · tunefleet`;
    statusHolder.replaceChildren(badge(job.status));
    subtitle.textContent = [job.job_id, job.config_name && `config ${job.config_name}`, job.user ? `by ${job.user} for team ${job.team || '—'}` : job.submitted_by && `by ${job.submitted_by}`]
      .filter(Boolean).join(' · ');
    cancelButton.hidden = TERMINAL.has(job.status);
    // Only an admin (queue.admin) preempts, and only a job that holds a worker.
    preemptButton.hidden = !(session.may('queue.admin') && (job.status === 'running' || job.status === 'dispatched'));
    if (job.status === 'failed' && job.error) {
      notice.replaceChildren(h('div', { class: 'callout danger', role: 'note' }, h('div', {}, h('strong', {}, 'Failed: '), job.error)));
    } else if (job.status === 'pending' && job.wait_reason) {
      notice.replaceChildren(h('div', { class: 'callout', role: 'note' }, h('div', {},
        h('strong', {}, `Waiting${job.queue_position ? ` (#${job.queue_position} in the queue)` : ''}: `), job.wait_reason)));
    } else {
      notice.replaceChildren();
    }
  }

  function renderProgress() {
    const p = job.progress || {};
    const pct = percentOf(p) ?? (job.status === 'completed' ? 100 : null);
    pctText.textContent = pct === null ? '—' : `${pct.toFixed(pct < 10 && pct % 1 ? 1 : 0)}%`;
    stepText.textContent = p.step !== undefined ? `step ${p.step}${p.total ? ` of ${p.total}` : ''}` : '';
    bigBar.className = `bar ${job.status === 'completed' ? 'done' : job.status === 'failed' ? 'failed' : ''}`;
    setBar(bigBar, pct ?? 0, `Job progress ${pct === null ? 'unknown' : `${pct.toFixed(0)}%`}`);
    metricsNow.replaceChildren(...Object.entries(p)
      .filter(([k, v]) => !HIDDEN_PROGRESS.has(k) && (typeof v === 'number' || typeof v === 'string'))
      .slice(0, 8)
      .map(([k, v]) => h('span', {}, `${k} `, h('b', {}, typeof v === 'number' ? metric(v) : v))));
  }

  const drawCharts = perFrame(() => {
    const names = history.names();
    chartsNote.hidden = names.length > 0;
    csvButton.hidden = history.size === 0;
    const steps = [0, Math.max(1, history.maxStep())]; // one axis for every chart, from step 0
    names.forEach((name, i) => {
      const primary = i === 0; // loss, when reported: names() puts it first
      let entry = charts.get(name);
      if (!entry || entry.primary !== primary) {
        const panel = chartPanel(name, { primary });
        if (entry) entry.panel.el.replaceWith(panel.el);
        entry = { panel, primary };
        charts.set(name, entry);
      }
      chartsBox.append(entry.panel.el); // keeps the panels in names() order
      entry.panel.update(history.points(name), steps);
    });
  });

  function renderTimeline() {
    const items = job.timeline.map((entry) => {
      const { title: what, note, bad } = describeEvent(entry);
      return h('li', {},
        h('span', { class: `node ${entry.kind}`, 'aria-hidden': 'true' }),
        h('div', { class: 'what' }, what),
        h('div', { class: 'when', title: dateTime(entry.at) },
          `${dateTime(entry.at)} · `, h('span', { class: 'age', dataset: { at: entry.at } }, ago(entry.at))),
        note ? h('div', { class: `why${bad ? ' bad' : ''}` }, note) : null);
    });
    if (job.status === 'pending') {
      items.push(h('li', {}, h('span', { class: 'node waiting', 'aria-hidden': 'true' }),
        h('div', { class: 'what' }, 'Waiting for a worker'),
        job.wait_reason ? h('div', { class: 'why' }, job.wait_reason) : null));
    }
    timeline.replaceChildren(...items);
  }

  /** Every second: the summary's times and the timeline's ages, from one clock reading,
   * so the two never disagree (the timeline is otherwise rebuilt only when it changes). */
  function tick() {
    if (!job) return;
    const now = Date.now();
    renderFacts(now);
    for (const age of timeline.querySelectorAll('.age')) age.textContent = ago(age.dataset.at, now);
  }

  function renderRequirements() {
    requirements.replaceChildren(
      fact('GPUs', job.gpu_count ? String(job.gpu_count) : 'any'),
      fact('Min VRAM', job.min_vram_gb ? `${gb(job.min_vram_gb)} per GPU` : '—'),
      fact('GPU name', job.gpu_name || '—'),
      fact('Retries', String(job.max_retries)),
      fact('Timeout', job.timeout_minutes ? `${job.timeout_minutes} min` : 'none'),
      h('div', { class: 'fact' }, h('dt', {}, 'Labels'), h('dd', {}, chips(job.worker_labels))),
    );
    const env = Object.keys(job.env || {});
    configBox.replaceChildren(
      h('details', { class: 'config' },
        h('summary', {}, 'Command and configuration'),
        h('p', { class: 'muted small' }, 'Command'),
        h('pre', { class: 'codeblock' }, job.command ? job.command.join(' ') : "the worker's default command"),
        env.length ? h('p', { class: 'muted small' }, `Environment: ${env.join(', ')} (values hidden)`) : null,
        h('p', { class: 'muted small' }, 'Configuration'),
        h('pre', { class: 'codeblock' }, JSON.stringify(job.config, null, 2)),
        job.dataloader ? [h('p', { class: 'muted small' }, 'Data loader'), h('pre', { class: 'codeblock' }, JSON.stringify(job.dataloader, null, 2))] : null));
  }

  function renderAll() {
    renderHead();
    renderFacts();
    renderProgress();
    renderTimeline();
    renderRequirements();
  }

  let loadSeq = 0;
  async function reload() {
    const seq = ++loadSeq;
    try {
      const data = await get(`/api/queue/${enc(jobId)}`);
      if (seq !== loadSeq) return;
      job = data;
      renderAll();
      loadMetrics();
      artifacts.load();
    } catch (error) {
      if (seq !== loadSeq) return;
      if (error.status === 404) {
        notice.replaceChildren(h('div', { class: 'callout danger', role: 'alert' }, h('div', {}, h('strong', {}, 'Not found. '), `There is no job ${jobId}.`)));
        logs.stop();
      } else {
        toast(error.detail, 'error');
      }
    }
  }
  const reloadSoon = debounce(reload, 250);

  // The stored history, read after the cursor: all of it first, then what is new.
  let metricsLoad = null;
  function loadMetrics() {
    metricsLoad ??= (async () => {
      try {
        for (let page = 0; page < 100; page += 1) {
          const data = await get(`/api/queue/${enc(jobId)}/metrics${query({ since: history.since })}`);
          history.addPoints(data.points);
          if (data.points.length < METRICS_PAGE) break;
        }
        drawCharts();
      } catch (error) {
        if (error.status !== 404) toast(error.detail, 'error');
      } finally {
        metricsLoad = null;
      }
    })();
    return metricsLoad;
  }

  csvButton.addEventListener('click', async () => {
    try {
      await download(`/api/queue/${enc(jobId)}/metrics?format=csv`, `${jobId}-metrics.csv`);
    } catch (error) {
      toast(error.detail, 'error');
    }
  });

  cancelButton.addEventListener('click', async () => {
    const ok = await confirmAction({
      title: `Cancel ${job.name || jobId}?`,
      message: [job.status === 'pending'
        ? 'The job leaves the queue and never runs.'
        : 'The job is stopped: its trainer gets SIGTERM, then SIGKILL after a grace period.'],
      confirmLabel: 'Cancel job',
      danger: true,
    });
    if (!ok) return;
    try {
      await post(`/api/queue/${enc(jobId)}/cancel`, { reason: 'cancelled from the web UI' });
      toast(`Job ${jobId} cancelled.`, 'success');
      reload();
    } catch (error) {
      toast(error.detail, 'error');
    }
  });

  preemptButton.addEventListener('click', async () => {
    const ok = await confirmAction({
      title: `Preempt ${job.name || jobId}?`,
      message: ['Its trainer gets SIGTERM and the server\'s grace (120 s by default) to write a checkpoint; then the job goes back to the head of its priority band, spends no retry, and its next attempt resumes from that checkpoint. Work since the last checkpoint is lost if the trainer does not save on SIGTERM.'],
      confirmLabel: 'Preempt',
    });
    if (!ok) return;
    try {
      const answer = await post(`/api/jobs/${enc(jobId)}/preempt`, { reason: 'from the web UI' });
      toast(`Preempting ${jobId}: its trainer has ${answer.grace_seconds} s to write a checkpoint.`, 'success');
      reload();
    } catch (error) {
      toast(error.detail, 'error');
    }
  });

  const offs = [
    live.on('resync', () => {
      reloadSoon();
      logs.nudge();
    }),
    live.on('job', (data) => {
      if (data.job_id !== jobId || !job) return;
      job.status = data.status ?? job.status;
      if (data.worker_id !== undefined) job.worker_id = data.worker_id;
      if (data.attempt !== undefined) job.attempts = data.attempt;
      if (data.undelivered !== undefined) job.undelivered = data.undelivered;
      if (data.preempted !== undefined) job.preempted = data.preempted;
      if (data.infrastructure_failures !== undefined) job.infrastructure_failures = data.infrastructure_failures;
      // The whole object (null once requeued): job_progress events then merge into it.
      if (data.progress !== undefined) job.progress = data.progress;
      if (data.error !== undefined) job.error = data.error;
      renderHead();
      renderFacts();
      renderProgress();
      reloadSoon();
    }),
    live.on('job_progress', (data) => {
      if (data.job_id !== jobId || !job) return;
      // The event holds the keys the report changed: merge them into what we hold.
      job.progress = { ...(job.progress || {}), ...data.progress };
      renderProgress();
      if (!history.addProgress(job.progress, data.attempt ?? job.attempts)) return;
      if (history.size > MAX_LIVE_POINTS) {
        // A long run watched for hours: the stored history is evenly thinned, read it again.
        history.clear();
        loadMetrics();
      }
      drawCharts();
    }),
    fleet.subscribe(() => job && (renderFacts(), renderTimeline())),
  ];
  const ticker = setInterval(tick, 1000);
  // Checkpoints are stored while the job runs, with no event of their own on the feed.
  const refresher = setInterval(() => job && !TERMINAL.has(job.status) && reloadSoon(), 10_000);
  const redraw = () => drawCharts();
  window.addEventListener('resize', redraw);
  reload();
  logs.start();

  return {
    unmount() {
      offs.forEach((off) => off());
      clearInterval(ticker);
      clearInterval(refresher);
      window.removeEventListener('resize', redraw);
      reloadSoon.cancel();
      logs.stop();
    },
  };
}
