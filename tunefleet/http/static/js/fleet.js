// The workers, shared by every page: loaded from GET /api/admin/workers on each
// (re)connect and kept current from the live feed's `worker` and `worker_deleted`.
// Tokens without admin.workers cannot list workers; `denied` says so.

import { get } from './api.js';
import { live } from './live.js';
import { session } from './session.js';

const listeners = new Set();

export const fleet = {
  workers: new Map(),
  loaded: false,
  denied: false,
  error: null,

  list() {
    return [...this.workers.values()];
  },

  get(id) {
    return this.workers.get(id) ?? null;
  },

  nameOf(id) {
    return this.workers.get(id)?.name ?? id;
  },

  subscribe(listener) {
    listeners.add(listener);
    return () => listeners.delete(listener);
  },

  changed() {
    for (const listener of listeners) listener(this);
  },

  async load() {
    if (!session.may('admin.workers')) {
      this.denied = true;
      this.loaded = true;
      this.changed();
      return;
    }
    try {
      const data = await get('/api/admin/workers');
      this.workers = new Map(data.workers.map((w) => [w.worker_id, w]));
      this.denied = false;
      this.error = null;
    } catch (error) {
      this.denied = error.status === 403;
      this.error = this.denied ? null : error.detail;
    }
    this.loaded = true;
    this.changed();
  },

  upsert(worker) {
    const known = this.workers.get(worker.worker_id);
    this.workers.set(worker.worker_id, { ...known, ...worker });
    this.changed();
  },

  remove(id) {
    if (this.workers.delete(id)) this.changed();
  },

  reset() {
    this.workers = new Map();
    this.loaded = false;
    this.denied = false;
    this.error = null;
  },
};

live.on('resync', () => fleet.load());
live.on('worker', (data) => data.worker && !fleet.denied && fleet.upsert(data.worker));
live.on('worker_deleted', (data) => fleet.remove(data.worker_id));
// A worker's row shows its job's progress: keep it current between worker events.
live.on('job_progress', (data) => {
  for (const worker of fleet.workers.values()) {
    if (worker.current_job_id === data.job_id) {
      // The keys the report changed, merged into the progress the worker's view holds.
      worker.job_progress = { ...(worker.job_progress || {}), ...data.progress };
      fleet.changed();
    }
  }
});

/** Connected: its SSE stream is open, so the scheduler may give it a job. A worker whose
 * stream closed keeps its status (idle, busy) until the heartbeat timeout, unconnected. */
export function isConnected(worker) {
  return Boolean(worker.connected) && worker.status !== 'offline' && worker.status !== 'connecting';
}
