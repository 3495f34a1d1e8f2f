// GPU-hours per UTC day as SVG bars, one chart per team (or user): no chart library.

import { h, svg } from './dom.js';
import { ticks } from './chart.js';

const M = { left: 46, right: 10, top: 10, bottom: 24 };
const DAY_MS = 86400000;

/** GPU-hours for people: two decimals, or two significant digits below 0.01. */
export function gpuHours(v) {
  return v === 0 || v >= 0.01 ? v.toFixed(2) : v.toPrecision(2);
}

/** Every UTC day from `since` to `until` (YYYY-MM-DD), so an idle day is a gap, not skipped. */
export function daysBetween(since, until) {
  const out = [];
  const start = Date.parse(`${since.slice(0, 10)}T00:00:00Z`);
  const end = Date.parse(until);
  for (let t = start; t < end && out.length < 400; t += DAY_MS) out.push(new Date(t).toISOString().slice(0, 10));
  return out;
}

/** Bars of `hours` ({day: GPU-hours}) over `days`, with the y axis in GPU-hours. */
export function dayBars(name, days, hours, [W, H] = [480, 170]) {
  const values = days.map((d) => hours[d] || 0);
  const top = Math.max(...values, 0) || 1;
  const yTicks = ticks(0, top, 4);
  const y1 = Math.max(top, yTicks[yTicks.length - 1]);
  const slot = (W - M.left - M.right) / Math.max(1, days.length);
  const py = (y) => M.top + (1 - y / y1) * (H - M.top - M.bottom);
  const total = values.reduce((a, b) => a + b, 0);
  const label = `GPU-hours of ${name} per day from ${days[0]} to ${days[days.length - 1]}: `
    + `${gpuHours(total)} in all, most ${gpuHours(Math.max(...values, 0))} in one day.`;
  const every = Math.max(1, Math.ceil(days.length / 6));
  return svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': label, preserveAspectRatio: 'xMidYMid meet' },
    yTicks.map((t) => [
      svg('line', { class: 'grid', x1: M.left, x2: W - M.right, y1: py(t).toFixed(1), y2: py(t).toFixed(1) }),
      svg('text', { class: 'axis-label', x: M.left - 6, y: py(t).toFixed(1), 'text-anchor': 'end', 'dominant-baseline': 'middle' }, String(t)),
    ]),
    days.map((day, i) => [
      values[i] > 0 ? svg('rect', {
        class: 'bar', x: (M.left + i * slot + slot * 0.15).toFixed(1), y: py(values[i]).toFixed(1),
        width: Math.max(1, slot * 0.7).toFixed(1), height: (py(0) - py(values[i])).toFixed(1),
        'data-day': day,
      }, svg('title', {}, `${day}: ${gpuHours(values[i])} GPU-hours`)) : null,
      i % every === 0 ? svg('text', {
        class: 'axis-label', x: (M.left + (i + 0.5) * slot).toFixed(1), y: H - 6, 'text-anchor': 'middle',
      }, day.slice(5)) : null,
    ]));
}

/** A titled chart of one team's (or user's) days. */
export function usageChart(name, days, hours) {
  const total = Object.values(hours).reduce((a, b) => a + b, 0);
  return h('figure', { class: 'chart usage-chart', dataset: { name } },
    h('figcaption', { class: 'chart-head' }, h('h3', {}, name), h('span', { class: 'value' }, `${gpuHours(total)} GPU-h`)),
    dayBars(name, days, hours));
}
