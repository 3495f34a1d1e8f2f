// A small SVG line chart (metric over steps), drawn with the DOM: no chart library.

import { h, svg } from './dom.js';
import { metric } from './format.js';

const M = { left: 46, right: 12, top: 10, bottom: 24 };
// Heights of the main metric's chart and of the small multiples; widths follow the page,
// so axis text keeps its real size at any width.
export const HEIGHTS = { primary: 200, small: 150 };
const MAX_DRAWN = 800;

function niceStep(range, count) {
  const raw = range / Math.max(1, count);
  const power = 10 ** Math.floor(Math.log10(raw));
  const unit = raw / power;
  return (unit <= 1 ? 1 : unit <= 2 ? 2 : unit <= 5 ? 5 : 10) * power;
}

export function ticks(min, max, count = 4) {
  if (min === max) return [min];
  const step = niceStep(max - min, count);
  const out = [];
  for (let v = Math.ceil(min / step) * step; v <= max + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

/** Keep the shape of a long series: the min and max of each bucket, in order. */
function thin(points) {
  if (points.length <= MAX_DRAWN) return points;
  const size = Math.ceil(points.length / (MAX_DRAWN / 2));
  const out = [];
  for (let i = 0; i < points.length; i += size) {
    const bucket = points.slice(i, i + size);
    let lo = bucket[0];
    let hi = bucket[0];
    for (const p of bucket) {
      if (p.y < lo.y) lo = p;
      if (p.y > hi.y) hi = p;
    }
    out.push(...(lo.x <= hi.x ? [lo, hi] : [hi, lo]));
  }
  out.push(points[points.length - 1]);
  return out;
}

/** `steps` ([first, last]) is the step axis; charts of one job share it. */
export function lineChart(points, name, [W, H] = [360, HEIGHTS.small], steps = null) {
  const xs = points.map((p) => p.x);
  const ys = points.map((p) => p.y);
  let [x0, x1] = steps ?? [Math.min(...xs), Math.max(...xs)];
  let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  if (x0 === x1) x1 = x0 + 1;
  if (y0 === y1) {
    const pad = Math.abs(y0) * 0.1 || 1;
    y0 -= pad;
    y1 += pad;
  }
  const yTicks = ticks(y0, y1, 4);
  y0 = Math.min(y0, yTicks[0]);
  y1 = Math.max(y1, yTicks[yTicks.length - 1]);
  const px = (x) => M.left + ((x - x0) / (x1 - x0)) * (W - M.left - M.right);
  const py = (y) => M.top + (1 - (y - y0) / (y1 - y0)) * (H - M.top - M.bottom);
  const drawn = thin(points);
  const line = drawn.map((p, i) => `${i ? 'L' : 'M'}${px(p.x).toFixed(1)},${py(p.y).toFixed(1)}`).join('');
  const base = py(y0).toFixed(1);
  const area = `${line}L${px(drawn[drawn.length - 1].x).toFixed(1)},${base}L${px(drawn[0].x).toFixed(1)},${base}Z`;
  const last = points[points.length - 1];
  const first = points[0];
  const label = `${name} over steps ${x0} to ${x1}: ${points.length} points, ${metric(first.y)} at step ${first.x}, `
    + `${metric(last.y)} at step ${last.x}, lowest ${metric(Math.min(...ys))}.`;
  return svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': label, preserveAspectRatio: 'xMidYMid meet' },
    yTicks.map((t) => [
      svg('line', { class: 'grid', x1: M.left, x2: W - M.right, y1: py(t).toFixed(1), y2: py(t).toFixed(1) }),
      svg('text', { class: 'axis-label', x: M.left - 6, y: py(t).toFixed(1), 'text-anchor': 'end', 'dominant-baseline': 'middle' }, metric(t)),
    ]),
    ticks(x0, x1, 5).filter((t) => Number.isInteger(t)).map((t) => svg('text', {
      class: 'axis-label', x: px(t).toFixed(1), y: H - 6, 'text-anchor': 'middle',
    }, String(t))),
    svg('path', { class: 'area', d: area }),
    svg('path', { class: 'line', d: line }),
    svg('circle', { class: 'dot', cx: px(last.x).toFixed(1), cy: py(last.y).toFixed(1), r: 3 }));
}

/** A titled chart panel; update(points) redraws it. The primary one is drawn wide. */
export function chartPanel(name, { primary = false } = {}) {
  const value = h('span', { class: 'value' });
  const holder = h('div');
  const el = h('figure', { class: primary ? 'chart primary' : 'chart', dataset: { metric: name } },
    h('figcaption', { class: 'chart-head' }, h('h3', {}, name), value), holder);
  return {
    el,
    update(points, steps = null) {
      if (!points.length) return;
      value.textContent = metric(points[points.length - 1].y);
      const width = Math.max(220, Math.round(holder.clientWidth || 360));
      const size = [width, primary ? HEIGHTS.primary : HEIGHTS.small];
      holder.replaceChildren(lineChart(points, name, size, steps));
    },
  };
}
