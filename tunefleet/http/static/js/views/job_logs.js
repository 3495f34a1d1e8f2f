// The job's log tail: GET /api/queue/{id}/logs?follow=true read as Server-Sent Events,
// reconnected with backoff until the server says `end`. Lines are appended once per
// frame, the oldest dropped past a limit, and the view follows the end while wanted.

import { enc } from '../api.js';
import { h, perFrame } from '../dom.js';
import { clock, dateTime } from '../format.js';
import { Backoff } from '../live.js';
import { session } from '../session.js';
import { eventData, readEventStream } from '../sse.js';

const MAX_LINES = 5000;

/** onLine(line) sees every line once; onEnd(data) when the job ended. */
export function logPanel(jobId, { onLine, onEnd }) {
  const box = h('div', {
    class: 'log', id: 'job-log', role: 'log', 'aria-live': 'off', tabindex: '0', 'aria-label': 'Job output',
  });
  const placeholder = h('div', { class: 'placeholder' }, 'Waiting for output…');
  box.append(placeholder);
  const follow = h('input', { type: 'checkbox', id: 'log-follow', checked: true });
  const count = h('span', { class: 'muted', id: 'log-count', 'aria-live': 'off' }, '0 lines');
  const status = h('span', { class: 'muted small', role: 'status' });
  const tools = h('div', { class: 'log-tools' },
    count, status, h('label', { for: 'log-follow' }, follow, 'Follow output'));

  const keys = new Set();
  let pending = [];
  let lastRowId = 0;
  let lastAttempt = null;
  let shown = 0;
  let total = 0;
  let ended = false;
  let stopped = false;
  let controller = null;
  let retryTimer = null;
  let autoScrolling = false;
  const backoff = new Backoff();

  function flushNow() {
    if (!pending.length) return;
    placeholder.remove();
    const fragment = document.createDocumentFragment();
    for (const line of pending) {
      if (line.attempt && line.attempt !== lastAttempt) {
        if (lastAttempt !== null || line.attempt > 1) {
          fragment.append(h('div', { class: 'sep' }, `── attempt ${line.attempt} ──`));
        }
        lastAttempt = line.attempt;
      }
      shown += 1;
      fragment.append(h('div', { class: `ln ${line.stream}` },
        h('span', { class: 'no' }, String(shown)),
        h('span', { class: 't', title: dateTime(line.at) }, clock(line.at)),
        h('span', { class: 'x' }, line.line)));
    }
    pending = [];
    box.append(fragment);
    while (box.childElementCount > MAX_LINES) box.firstElementChild.remove();
    count.textContent = `${total} line${total === 1 ? '' : 's'}`;
    if (follow.checked) scrollToEnd();
  }
  const flush = perFrame(flushNow);

  function scrollToEnd() {
    autoScrolling = true;
    box.scrollTop = box.scrollHeight;
    requestAnimationFrame(() => { autoScrolling = false; });
  }

  box.addEventListener('scroll', () => {
    if (autoScrolling) return;
    const atEnd = box.scrollHeight - box.scrollTop - box.clientHeight < 24;
    follow.checked = atEnd;
  });
  follow.addEventListener('change', () => follow.checked && scrollToEnd());

  function addLine(line, id) {
    if (id) lastRowId = Math.max(lastRowId, Number(id) || 0);
    const key = `${line.attempt ?? 1}:${line.seq}`;
    if (keys.has(key)) return;
    keys.add(key);
    total += 1;
    pending.push(line);
    onLine?.(line);
    flush();
  }

  function end(data) {
    ended = true;
    status.textContent = '';
    const bad = data.status === 'failed';
    const text = `── job ${data.status}${data.error ? `: ${data.error}` : ''} ──`;
    flushNow();
    placeholder.remove();
    box.append(h('div', { class: `end${bad ? ' bad' : ''}` }, text));
    if (follow.checked) scrollToEnd();
    onEnd?.(data);
  }

  async function connect() {
    if (stopped || ended) return;
    controller = new AbortController();
    status.textContent = '';
    try {
      await readEventStream(`/api/queue/${enc(jobId)}/logs?follow=true&from_seq=${lastRowId + 1}`, {
        token: session.token,
        signal: controller.signal,
        onOpen: () => backoff.reset(),
        onEvent: (event) => {
          const data = eventData(event);
          if (!data) return;
          if (event.type === 'log') addLine(data, event.id);
          else if (event.type === 'end') end(data);
        },
      });
    } catch (error) {
      if (stopped) return;
      if (error.status === 401) {
        session.signOut(session.ended());
        return;
      }
      if (error.status === 404) {
        status.textContent = 'This job does not exist.';
        return;
      }
    }
    if (stopped || ended) return;
    const delay = backoff.next();
    status.textContent = `Log stream interrupted; reconnecting in ${Math.ceil(delay / 1000)} s…`;
    retryTimer = setTimeout(() => {
      retryTimer = null;
      connect();
    }, delay);
  }

  return {
    el: h('div', {}, h('div', { class: 'card-head' }, h('h2', { id: 'log-title' }, 'Log'), tools), box),
    start: connect,
    /** Reconnect at once (after the page's live feed came back). */
    nudge() {
      if (!ended && !stopped && retryTimer) {
        clearTimeout(retryTimer);
        retryTimer = null;
        connect();
      }
    },
    stop() {
      stopped = true;
      clearTimeout(retryTimer);
      controller?.abort();
    },
  };
}
