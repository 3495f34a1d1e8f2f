// A job's metrics over steps, pieced together from what the page can see: the progress
// reports (live `job_progress` events and the job's latest progress) and the training
// log, whose lines often carry the same numbers ("step 12/60 loss 0.41 lr=1e-4").

const NOT_METRICS = new Set(['step', 'total', 'percent', 'global_step', 'steps', 'max_steps']);
const STEP = /\b(?:global_)?step\s*[=:]?\s*(\d+)(?:\s*\/\s*\d+)?/i;
const PAIR = /(?:^|[\s,;|([{])([A-Za-z][\w./-]*)\s*(?:=|:|\s)\s*(-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)(?=$|[\s,;|)\]}%])/g;
const MAX_LINE = 2000;
const MAX_POINTS = 20000;

/** {step, values} from a log line that names a step, else null. */
export function parseLogMetrics(line) {
  if (!line || line.length > MAX_LINE) return null;
  const match = STEP.exec(line);
  if (!match) return null;
  const step = Number(match[1]);
  const rest = `${line.slice(0, match.index)} ${line.slice(match.index + match[0].length)}`;
  const values = {};
  for (const [, key, value] of rest.matchAll(PAIR)) {
    if (NOT_METRICS.has(key.toLowerCase())) continue;
    const number = Number(value);
    if (Number.isFinite(number)) values[key] = number;
  }
  return Object.keys(values).length ? { step, values } : null;
}

export class MetricHistory {
  constructor() {
    this.series = new Map();
    this.size = 0;
  }

  add(step, name, value) {
    if (!Number.isFinite(step) || typeof value !== 'number' || !Number.isFinite(value)) return;
    if (this.size >= MAX_POINTS) return;
    let points = this.series.get(name);
    if (!points) {
      points = new Map();
      this.series.set(name, points);
    }
    if (!points.has(step)) this.size += 1;
    points.set(step, value);
  }

  addProgress(progress) {
    if (!progress || typeof progress.step !== 'number') return;
    for (const [key, value] of Object.entries(progress)) {
      if (!NOT_METRICS.has(key)) this.add(progress.step, key, value);
    }
  }

  addLogLine(text) {
    const parsed = parseLogMetrics(text);
    if (!parsed) return false;
    for (const [key, value] of Object.entries(parsed.values)) this.add(parsed.step, key, value);
    return true;
  }

  /** Loss first, then other losses, then the rest by name; only series with 2+ points. */
  names() {
    const rank = (name) => (name === 'loss' ? 0 : /loss/i.test(name) ? 1 : 2);
    return [...this.series.keys()]
      .filter((name) => this.series.get(name).size >= 2)
      .sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
  }

  points(name) {
    return [...(this.series.get(name) ?? new Map())]
      .map(([x, y]) => ({ x, y }))
      .sort((a, b) => a.x - b.x);
  }
}
