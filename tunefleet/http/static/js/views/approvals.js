// Approvals: the jobs awaiting a decision the signed-in user may take (a lead: their
// teams'; an admin: all), each with Approve and Reject; and the count in the header,
// kept current from the live job events (any job change may be a submit or a decision).

import { get, post, enc } from '../api.js';
import { KeyedRows, emptyState, h } from '../dom.js';
import { ago } from '../format.js';
import { live } from '../live.js';
import { jobHref } from '../router.js';
import { session } from '../session.js';
import { toast } from '../ui.js';
import { pageHead, permissionNote } from './common.js';

const PATH = '/api/queue/approvals';

/** The header's count: shown only to tokens holding queue.approve. */
export const approvalsCount = {
  off: null,
  start() {
    const link = document.getElementById('nav-approvals');
    const count = document.getElementById('approvals-count');
    if (!session.may('queue.approve')) {
      link.hidden = true;
      return;
    }
    link.hidden = false;
    const refresh = async () => {
      try {
        const data = await get(PATH);
        count.textContent = String(data.total);
        count.dataset.count = String(data.total);
      } catch (error) {
        if (error.status === 403) link.hidden = true;
      }
    };
    this.refresh = refresh;
    this.off = live.on('job', refresh);
    refresh();
  },
  refresh() {},
  stop() {
    this.off?.();
    this.off = null;
    this.refresh = () => {};
  },
};

export function mount(main) {
  let loadSeq = 0;
  const tbody = h('tbody');
  const table = h('table', { class: 'data', id: 'approvals-table' },
    h('caption', { class: 'sr-only' }, 'Jobs awaiting approval, oldest first'),
    h('thead', {}, h('tr', {}, ['Job', 'User (team)', 'GPUs', 'Submitted', 'Why', ''].map((t) => h('th', { scope: 'col' }, t)))),
    tbody);
  const empty = h('div');
  const content = h('section', { class: 'card', 'aria-label': 'Jobs awaiting approval' },
    h('div', { class: 'table-wrap' }, table), empty);
  main.append(pageHead('Approvals', 'Jobs an approval rule held at submit: approve to queue them in their original place, or reject.'), content);

  async function decide(job, action) {
    let body = {};
    if (action === 'reject') {
      const reason = window.prompt(`Why reject ${job.name || job.job_id}? (optional)`);
      if (reason === null) return;
      body = reason ? { reason } : {};
    }
    try {
      const data = await post(`/api/queue/${enc(job.job_id)}/${action}`, body);
      toast(`${action === 'approve' ? 'Approved' : 'Rejected'} ${job.name || job.job_id}; it is ${data.status}.`, 'success');
    } catch (error) {
      toast(`Could not ${action} ${job.job_id}: ${error.detail}`, 'error');
    }
    reload();
    approvalsCount.refresh();
  }

  const rows = new KeyedRows(tbody, [
    { label: 'Job', sig: (j) => `${j.name}`, render: (j) => h('a', { href: jobHref(j.job_id) }, j.name || j.job_id) },
    { label: 'User (team)', sig: (j) => `${j.user}/${j.team}`, render: (j) => `${j.user ?? '—'} (${j.team ?? '—'})` },
    { label: 'GPUs', className: 'num', sig: (j) => String(j.gpu_count), render: (j) => String(j.gpu_count) },
    { label: 'Submitted', sig: (j) => `${j.submitted_at}`, render: (j) => ago(j.submitted_at) },
    { label: 'Why', sig: (j) => `${j.wait_reason}`, render: (j) => j.wait_reason || '—' },
    {
      label: '',
      sig: (j) => j.job_id,
      render: (j) => h('div', { class: 'btn-row' },
        h('button', { class: 'btn small primary', type: 'button', onclick: () => decide(j, 'approve') }, 'Approve'),
        h('button', { class: 'btn small danger', type: 'button', onclick: () => decide(j, 'reject') }, 'Reject')),
    },
  ], (j) => j.job_id);

  async function reload() {
    const seq = ++loadSeq;
    try {
      const data = await get(PATH);
      if (seq !== loadSeq) return;
      rows.update(data.jobs);
      table.hidden = data.jobs.length === 0;
      empty.replaceChildren(data.jobs.length ? '' : emptyState('No jobs await your approval', 'Jobs an approval rule holds at submit appear here.'));
    } catch (error) {
      if (seq !== loadSeq) return;
      if (error.status === 403) {
        content.replaceChildren(permissionNote('queue.approve', 'approve jobs'));
        return;
      }
      table.hidden = true;
      empty.replaceChildren(emptyState('Could not load the jobs awaiting approval', error.detail));
    }
  }

  const off = live.on('job', reload);
  reload();
  return { unmount: off };
}
