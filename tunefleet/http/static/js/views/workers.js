// Workers: counters, a filterable table kept live from the event stream, and the
// admin actions (create, drain, resume, quarantine, release, rotate token, delete).

import { del, enc, get, post } from '../api.js';
import { KeyedRows, badge, bar, chips, emptyState, h } from '../dom.js';
import { fleet, isConnected } from '../fleet.js';
import { ago, dateTime, duration, gb, ms, percentOf } from '../format.js';
import { globMatch } from '../matching.js';
import { jobHref } from '../router.js';
import { WORKER_STATES, stateLabel } from '../states.js';
import { confirmAction, toast } from '../ui.js';
import { openCreateWorker, showRotatedToken } from './worker_dialogs.js';
import { pageHead, permissionNote } from './common.js';

// Every state has a counter but connecting (never connected yet), which the status
// filter lists last.
const COUNTED = WORKER_STATES.filter((s) => s !== 'connecting');
const STATUSES = [...COUNTED, 'connecting'];
const COUNTERS = [['', 'Total', 'total'], ...COUNTED.map((s) => [s, stateLabel(s), s])];

/** "gpu_type=a100*" matches by glob; plain text matches any label key or value. */
export function labelFilterMatches(labels, filter) {
  const text = filter.trim();
  if (!text) return true;
  const entries = Object.entries(labels || {});
  const eq = text.indexOf('=');
  if (eq > 0) {
    const key = text.slice(0, eq).trim();
    const pattern = text.slice(eq + 1).trim() || '*';
    return key in (labels || {}) && globMatch(String(labels[key]), pattern);
  }
  const needle = text.toLowerCase();
  return entries.some(([k, v]) => k.toLowerCase().includes(needle) || String(v).toLowerCase().includes(needle));
}

function gpuCell(w) {
  if (!w.gpu_count) {
    return h('div', { class: 'gpu' },
      h('span', { class: 'muted' }, 'No GPU'),
      w.accelerator_type ? h('span', { class: 'cell-sub' }, w.accelerator_type) : null);
  }
  const util = w.gpu_utilization || [];
  const used = w.vram_used_gb || [];
  return h('div', { class: 'gpu' },
    h('span', {}, h('b', {}, `${w.gpu_count} ×`), ` ${w.gpu_name || 'GPU'}`),
    h('span', { class: 'cell-sub' }, `${gb(w.gpu_vram_gb)} each`),
    util.length && isConnected(w)
      ? h('div', { class: 'gpu-util', role: 'list', 'aria-label': 'GPU utilisation' },
        util.map((pct, i) => {
          const label = `GPU ${i}: ${Math.round(pct)}%${used[i] !== undefined ? `, ${gb(used[i])} used` : ''}`;
          return h('div', { class: 'u', role: 'listitem', title: label },
            h('span', { 'aria-hidden': 'true' }, `${Math.round(pct)}%`),
            bar(pct, { label }));
        }))
      : null);
}

/** The name, id and host; the agent's own name where it differs from the admin's, and
 * each setting of the agent that disagrees with the admin's (the admin's is in force). */
function workerCell(w) {
  const warnings = w.warnings || [];
  return h('div', {},
    h('div', { class: 'cell-title' }, w.name),
    h('div', { class: 'cell-sub' }, w.worker_id),
    w.hostname && w.hostname !== w.name ? h('div', { class: 'cell-sub', title: 'host name' }, w.hostname) : null,
    w.agent_name && w.agent_name !== w.name
      ? h('div', { class: 'cell-sub agent-name', title: 'the name its agent registered with' }, `agent: ${w.agent_name}`)
      : null,
    warnings.length
      ? h('ul', { class: 'worker-warnings', 'aria-label': `Warnings about ${w.name}` },
        warnings.map((text) => h('li', {}, text)))
      : null);
}

/** Its GPUs' health from the agent's last reading: nothing for an agent that sends none
 * (SimpleTuner's), a quiet note when healthy, the worst finding when not (every finding
 * in the tooltip). A reading that turns unhealthy quarantines the worker (the note
 * above it says so); the health itself only informs. */
export function healthNote(w) {
  if (!w.health) return null;
  if (w.health === 'healthy') return h('div', { class: 'cell-note health healthy' }, 'GPUs healthy');
  const problems = w.health_problems || [];
  const text = w.health === 'unhealthy'
    ? `unhealthy: ${w.health_reason}` : `degraded: ${w.health_reason}`;
  return h('div', { class: `cell-note health ${w.health}`, title: problems.join('\n') || null, role: 'status' }, text);
}

function jobCell(w) {
  if (!w.current_job_id) return h('span', { class: 'faint' }, '—');
  const pct = percentOf(w.job_progress);
  return h('div', {},
    h('a', { href: jobHref(w.current_job_id), class: 'mono job-link', title: w.current_job_id }, w.current_job_id),
    pct !== null ? h('div', { class: 'cell-note' }, `${pct.toFixed(0)}% done`) : null);
}

function uptime(w, now) {
  if (!isConnected(w) || !w.connected_at) return '—';
  return duration((now - ms(w.connected_at)) / 1000);
}

export function mount(main) {
  let statusFilter = '';
  let labelFilter = '';
  const busy = new Set(); // worker ids with an action in flight

  const statusSelect = h('select', { id: 'wf-status' },
    h('option', { value: '' }, 'All statuses'),
    STATUSES.map((s) => h('option', { value: s }, stateLabel(s))));
  const labelInput = h('input', {
    id: 'wf-label', type: 'search', placeholder: 'gpu_type=a100*  or any text', autocomplete: 'off', spellcheck: 'false',
  });
  const counterEls = new Map();
  const counters = h('div', { class: 'stats', role: 'group', 'aria-label': 'Worker counts; choose one to filter' },
    COUNTERS.map(([status, label, dot]) => {
      const value = h('span', { class: 'stat-value' }, '–');
      const button = h('button', {
        class: 'stat', type: 'button', 'aria-pressed': 'false', dataset: { status },
        onClick: () => setStatus(statusFilter === status ? '' : status),
      }, h('span', { class: 'stat-label' }, h('span', { class: `stat-dot ${dot}`, 'aria-hidden': 'true' }), label), value);
      counterEls.set(status, { button, value, label });
      return button;
    }));

  const tbody = h('tbody');
  const table = h('table', { class: 'data', id: 'workers-table' },
    h('caption', { class: 'sr-only' }, 'Workers'),
    h('thead', {}, h('tr', {}, ['Worker', 'Status', 'GPUs', 'Type', 'Labels', 'Current job', 'Uptime · last seen', 'Actions']
      .map((t) => h('th', { scope: 'col', class: t === 'Actions' ? 'actions' : '' }, t === 'Actions' ? h('span', { class: 'sr-only' }, t) : t)))),
    tbody);
  const empty = h('div');
  const footer = h('div', { class: 'card-foot' });
  const card = h('section', { class: 'card', 'aria-label': 'Workers list' },
    h('div', { class: 'card-head' },
      h('div', { class: 'filters' },
        h('div', { class: 'field' }, h('label', { for: 'wf-status' }, 'Status'), statusSelect),
        h('div', { class: 'field wide' }, h('label', { for: 'wf-label' }, 'Label'), labelInput))),
    h('div', { class: 'table-wrap' }, table), empty, footer);
  const denied = h('div', { hidden: true });

  const createButton = h('button', { class: 'btn primary', type: 'button', id: 'create-worker' }, '+ Create worker');
  createButton.addEventListener('click', () => openCreateWorker());
  main.append(pageHead('Workers', 'The machines that run jobs for this orchestrator.', createButton), counters, denied, card);

  const now = () => Date.now();
  const rows = new KeyedRows(tbody, [
    {
      label: 'Worker', sig: (w) => JSON.stringify([w.name, w.hostname, w.is_local, w.agent_name, w.warnings]),
      render: workerCell,
    },
    {
      label: 'Status', sig: (w) => JSON.stringify([w.status, w.drain_requested, w.connected, w.quarantine_reason, w.health, w.health_problems]),
      render: (w) => h('div', {}, badge(w.status),
        w.status !== 'offline' && !w.connected
          ? h('div', { class: 'cell-note not-connected', title: 'No open stream: it takes no job until its agent reconnects' }, 'not connected')
          : null,
        w.drain_requested && w.status !== 'draining' ? h('div', { class: 'cell-note' }, 'drain requested') : null,
        // A bad machine takes no new job: say why (failures there, its GPUs' health, or by hand).
        w.quarantined ? h('div', { class: 'cell-note quarantined', title: 'Takes no new job until released' }, `quarantined: ${w.quarantine_reason}`) : null,
        healthNote(w)),
    },
    {
      label: 'GPUs',
      sig: (w) => JSON.stringify([w.gpu_count, w.gpu_name, w.gpu_vram_gb, w.accelerator_type, w.gpu_utilization, w.vram_used_gb, w.status]),
      render: gpuCell,
    },
    { label: 'Type', sig: (w) => `${w.worker_type}|${w.is_local}`, render: (w) => (w.is_local ? 'built-in local' : w.worker_type) },
    { label: 'Labels', sig: (w) => JSON.stringify(w.labels), render: (w) => chips(w.labels) },
    { label: 'Current job', sig: (w) => `${w.current_job_id}|${percentOf(w.job_progress)}`, render: jobCell },
    {
      label: 'Uptime · seen', className: 'nowrap', sig: (w) => `${uptime(w, now())}|${ago(w.last_seen, now())}`,
      render: (w) => h('div', {},
        h('div', { title: 'connected for' }, uptime(w, now())),
        h('div', { class: 'cell-note', title: dateTime(w.last_seen) }, w.last_seen ? `seen ${ago(w.last_seen, now())}` : 'never seen')),
    },
    { label: 'Actions', className: 'actions', sig: (w) => `${w.status}|${w.drain_requested}|${w.quarantined}|${busy.has(w.worker_id)}`, render: actionsCell },
  ], (w) => w.worker_id);

  function actionsCell(w) {
    // aria-disabled, not disabled: the button keeps keyboard focus while its action runs.
    const pending = busy.has(w.worker_id);
    const button = (label, handler, cls = 'btn small') => h('button', {
      class: cls, type: 'button', 'aria-disabled': pending ? 'true' : null, 'aria-label': `${label} ${w.name}`,
      onClick: () => !busy.has(w.worker_id) && handler(w),
    }, label);
    const buttons = [];
    if (w.drain_requested || w.status === 'draining') buttons.push(button('Resume', resume));
    else if (w.status !== 'offline') buttons.push(button('Drain', drain));
    if (w.quarantined) buttons.push(button('Release', release));
    else if (!w.is_local) buttons.push(button('Quarantine', quarantine, 'btn small danger'));
    if (!w.is_local) buttons.push(button('Rotate token', rotate));
    if (!w.is_local && w.status === 'offline') buttons.push(button('Delete', remove, 'btn small danger'));
    return h('div', { class: 'btn-row' }, buttons);
  }

  async function act(worker, work, done) {
    busy.add(worker.worker_id);
    render();
    try {
      const result = await work();
      done?.(result);
    } catch (error) {
      toast(`${worker.name}: ${error.detail}`, 'error');
    } finally {
      busy.delete(worker.worker_id);
      render();
    }
  }

  const refresh = async (id) => {
    try {
      fleet.upsert(await get(`/api/admin/workers/${enc(id)}`));
    } catch {
      // The live feed will bring the change anyway.
    }
  };

  async function drain(w) {
    const ok = await confirmAction({
      title: `Drain ${w.name}?`,
      message: [`${w.name} finishes ${w.current_job_id ? 'its current job' : 'any job it has'} and then takes no more work until you resume it.`],
      confirmLabel: 'Drain',
    });
    if (!ok) return;
    await act(w, () => post(`/api/admin/workers/${enc(w.worker_id)}/drain`), () => {
      toast(`${w.name} is draining.`, 'success');
      return refresh(w.worker_id);
    });
  }

  async function resume(w) {
    await act(w, () => post(`/api/admin/workers/${enc(w.worker_id)}/resume`), () => {
      toast(`${w.name} takes jobs again.`, 'success');
      return refresh(w.worker_id);
    });
  }

  async function quarantine(w) {
    const ok = await confirmAction({
      title: `Quarantine ${w.name}?`,
      message: [
        `${w.name} takes no new job until you release it; ${w.current_job_id ? 'its current job finishes' : 'it stays connected'}.`,
        w.worker_type === 'ephemeral' ? 'An ephemeral worker is told to exit.' : 'Use it for a machine you suspect is broken.',
      ],
      confirmLabel: 'Quarantine',
      danger: true,
    });
    if (!ok) return;
    await act(w, () => post(`/api/admin/workers/${enc(w.worker_id)}/quarantine`, {}), () => {
      toast(`${w.name} is quarantined.`, 'success');
      return refresh(w.worker_id);
    });
  }

  async function release(w) {
    await act(w, () => post(`/api/admin/workers/${enc(w.worker_id)}/release`), () => {
      toast(`${w.name} is released from quarantine and takes jobs again.`, 'success');
      return refresh(w.worker_id);
    });
  }

  async function rotate(w) {
    const ok = await confirmAction({
      title: `Rotate the token of ${w.name}?`,
      message: [
        'The current token stops working at once and the agent is disconnected.',
        'Restart the agent with the new token, which is shown only once.',
      ],
      confirmLabel: 'Rotate token',
      danger: true,
    });
    if (!ok) return;
    await act(w, () => post(`/api/admin/workers/${enc(w.worker_id)}/token`), (data) => showRotatedToken(w, data));
  }

  async function remove(w) {
    const ok = await confirmAction({
      title: `Delete ${w.name}?`,
      message: ['The worker and its token are removed for good; its agent can no longer connect.'],
      confirmLabel: 'Delete worker',
      danger: true,
    });
    if (!ok) return;
    await act(w, () => del(`/api/admin/workers/${enc(w.worker_id)}`), () => {
      fleet.remove(w.worker_id);
      toast(`${w.name} deleted.`, 'success');
    });
  }

  // Without admin.workers the list is closed, but the queue statistics still count workers.
  let statsAsked = false;
  async function countsFromStats() {
    if (statsAsked) return;
    statsAsked = true;
    try {
      const { workers } = await get('/api/queue/stats');
      for (const [status, el] of counterEls) {
        const value = status ? workers[status] : workers.total;
        el.value.textContent = String(value ?? 0);
        el.button.disabled = true;
        el.button.setAttribute('aria-label', `${el.label}: ${value ?? 0}`);
      }
    } catch {
      statsAsked = false;
    }
  }

  function setStatus(status) {
    statusFilter = status;
    statusSelect.value = status;
    render();
  }

  function render() {
    if (!fleet.loaded) return;
    denied.hidden = !fleet.denied;
    card.hidden = fleet.denied;
    createButton.hidden = fleet.denied;
    if (fleet.denied) {
      denied.replaceChildren(permissionNote('admin.workers', 'see and manage workers'));
      countsFromStats();
      return;
    }
    const all = fleet.list().sort((a, b) => (a.is_local - b.is_local) || a.name.localeCompare(b.name));
    const counts = { '': all.length };
    for (const s of STATUSES) counts[s] = all.filter((w) => w.status === s).length;
    for (const [status, el] of counterEls) {
      el.value.textContent = String(counts[status]);
      el.button.setAttribute('aria-pressed', String(statusFilter === status && status !== ''));
      el.button.setAttribute('aria-label', `${el.label}: ${counts[status]}`);
    }
    const shown = all.filter((w) => (!statusFilter || w.status === statusFilter) && labelFilterMatches(w.labels, labelFilter));
    rows.update(shown);
    table.hidden = shown.length === 0;
    if (fleet.error) empty.replaceChildren(emptyState('Could not load the workers', fleet.error));
    else if (!all.length) empty.replaceChildren(emptyState('No workers yet', 'Create one, then start its agent with the command shown.'));
    else if (!shown.length) empty.replaceChildren(emptyState('No worker matches the filter'));
    else empty.replaceChildren();
    footer.textContent = shown.length === all.length
      ? `${all.length} worker${all.length === 1 ? '' : 's'}`
      : `${shown.length} of ${all.length} workers shown`;
  }

  statusSelect.addEventListener('change', () => setStatus(statusSelect.value));
  labelInput.addEventListener('input', () => {
    labelFilter = labelInput.value;
    render();
  });
  const unsubscribe = fleet.subscribe(render);
  const ticker = setInterval(render, 1000);
  if (fleet.loaded) render();
  else empty.replaceChildren(emptyState('Loading workers…'));

  return {
    unmount() {
      unsubscribe();
      clearInterval(ticker);
    },
  };
}
