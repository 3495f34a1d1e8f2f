// A job's metric history as the orchestrator stores it (GET /api/queue/ID/metrics),
// kept current by the live `job_progress` events. Every chart reads the same points on
// one step axis from step 0, so their ranges agree.

// The same rules as the orchestrator's (tunefleet/storage/store_metrics.py).
const STEP_KEYS = ['step', 'global_step', 'current_step'];
const NOT_METRICS = new Set([...STEP_KEYS, 'total', 'total_steps', 'max_steps', 'steps', 'percent']);
const MAX_METRICS = 32;
const MAX_NAME = 64;
// Live points past this many: reload the stored (evenly thinned) history instead.
export const MAX_LIVE_POINTS = 5000;

const finite = (v) => typeof v === 'number' && Number.isFinite(v);

/** {step, values} of a progress report, as the orchestrator would store it, or null. */
export function pointOf(progress) {
  if (!progress) return null;
  const key = STEP_KEYS.find((k) => k in progress);
  const step = key === undefined ? undefined : progress[key];
  if (!finite(step) || step < 0) return null;
  const values = {};
  let count = 0;
  for (const [name, value] of Object.entries(progress)) {
    if (NOT_METRICS.has(name) || !finite(value) || name.length > MAX_NAME) continue;
    values[name] = value;
    if (++count === MAX_METRICS) break;
  }
  return count ? { step: Math.trunc(step), values } : null;
}

export class MetricHistory {
  constructor() {
    this.clear();
  }

  clear() {
    this.attempts = new Map(); // attempt -> Map(step -> values)
    this.since = 0; // the stored history's cursor: read points after it next
    this.size = 0;
    this.cache = null;
  }

  put(attempt, step, values) {
    let steps = this.attempts.get(attempt);
    if (!steps) {
      steps = new Map();
      this.attempts.set(attempt, steps);
    }
    if (!steps.has(step)) this.size += 1;
    steps.set(step, values);
    this.cache = null;
  }

  /** Points from the API ({seq, attempt, step, values}). */
  addPoints(points) {
    for (const p of points) {
      this.put(p.attempt, p.step, p.values);
      this.since = Math.max(this.since, p.seq);
    }
  }

  /** A live report; true when it was a point (it names a step and a number). */
  addProgress(progress, attempt) {
    const point = pointOf(progress);
    if (!point || !attempt) return false;
    this.put(attempt, point.step, point.values);
    return true;
  }

  /** The run as it stands, step -> values: an attempt that started again (from a
   * checkpoint, or from 0) replaces the earlier attempts' points from its first step. */
  merged() {
    if (this.cache) return this.cache;
    const run = new Map();
    let cutoff = Infinity;
    for (const attempt of [...this.attempts.keys()].sort((a, b) => b - a)) {
      const steps = this.attempts.get(attempt);
      let first = Infinity;
      for (const [step, values] of steps) {
        first = Math.min(first, step);
        if (step < cutoff && !run.has(step)) run.set(step, values);
      }
      cutoff = Math.min(cutoff, first);
    }
    this.cache = new Map([...run].sort((a, b) => a[0] - b[0]));
    return this.cache;
  }

  /** The step axis every chart shares: 0 to the newest step. */
  maxStep() {
    let max = 0;
    for (const step of this.merged().keys()) max = Math.max(max, step);
    return max;
  }

  /** Loss first, then other losses, then the rest by name; only series with 2+ points. */
  names() {
    const counts = new Map();
    for (const values of this.merged().values()) {
      for (const name of Object.keys(values)) counts.set(name, (counts.get(name) ?? 0) + 1);
    }
    const rank = (name) => (name === 'loss' ? 0 : /loss/i.test(name) ? 1 : 2);
    return [...counts.keys()]
      .filter((name) => counts.get(name) >= 2)
      .sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
  }

  points(name) {
    const out = [];
    for (const [step, values] of this.merged()) {
      if (finite(values[name])) out.push({ x: step, y: values[name] });
    }
    return out;
  }
}
