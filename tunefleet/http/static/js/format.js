// Times, durations and numbers as people read them. The API sends ISO 8601 UTC.

export function ms(iso) {
  if (!iso) return null;
  const t = Date.parse(iso);
  return Number.isNaN(t) ? null : t;
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return '—';
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${String(s % 60).padStart(2, '0')} s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h} h ${String(m % 60).padStart(2, '0')} min`;
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}

export function ago(iso, now = Date.now()) {
  const t = ms(iso);
  if (t === null) return '—';
  const s = Math.round((now - t) / 1000);
  if (s < 5) return 'just now';
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 172800) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

const pad = (n) => String(n).padStart(2, '0');

/** Local date and time, 2024-01-15 10:30:05. */
export function dateTime(iso) {
  const t = ms(iso);
  if (t === null) return '—';
  const d = new Date(t);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${clock(iso)}`;
}

export function clock(iso) {
  const t = ms(iso);
  if (t === null) return '';
  const d = new Date(t);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function gb(value) {
  if (value === null || value === undefined) return '—';
  return `${Number(value).toFixed(value >= 100 ? 0 : 1).replace(/\.0$/, '')} GB`;
}

/** A metric value with about four significant digits. */
export function metric(value) {
  if (typeof value !== 'number' || !Number.isFinite(value)) return String(value ?? '—');
  const abs = Math.abs(value);
  if (abs !== 0 && (abs < 1e-3 || abs >= 1e6)) return value.toExponential(2);
  if (Number.isInteger(value)) return String(value);
  return String(Number(value.toPrecision(4)));
}

export function plural(n, word, many = `${word}s`) {
  return `${n} ${n === 1 ? word : many}`;
}

// Retries spent against the attempts allowed: a dispatch that never reached its worker
// (`undelivered`), a preempted attempt and one the infrastructure ended (it spends the
// server's --infra-retries instead) spend none, so they are counted apart, else "3 / 1"
// would read as a bug.
const ATTEMPTS_APART = [
  ['undelivered', 'not delivered'],
  ['preempted', 'preempted'],
  ['infrastructure_failures', 'infrastructure'],
];

export function attemptsText(job, of = '/') {
  const apart = ATTEMPTS_APART.map(([key, label]) => [job[key] ?? 0, label]).filter(([n]) => n > 0);
  const spentNone = apart.reduce((sum, [n]) => sum + n, 0);
  const text = `${job.attempts - spentNone} ${of} ${job.max_retries + 1}`;
  return apart.length ? `${text} (${apart.map(([n, label]) => `${n} ${label}`).join(', ')})` : text;
}

export function percentOf(progress) {
  if (!progress) return null;
  if (typeof progress.percent === 'number') return progress.percent;
  if (typeof progress.step === 'number' && typeof progress.total === 'number' && progress.total > 0) {
    return Math.min(100, (progress.step / progress.total) * 100);
  }
  return null;
}

/** A byte count as people read it: 512 B, 1.5 KiB, 2.0 GiB. */
export function bytes(value) {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) return '—';
  if (value < 1024) return `${value} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let n = value / 1024;
  let unit = 0;
  while (n >= 1024 && unit < units.length - 1) {
    n /= 1024;
    unit += 1;
  }
  return `${n.toFixed(n >= 100 ? 0 : 1)} ${units[unit]}`;
}
