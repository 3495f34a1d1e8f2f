// The live feed: one /api/events stream for the whole page, reconnected with backoff.
//
// Views subscribe with `live.on(kind, fn)`. Kinds are the orchestrator's (`worker`,
// `worker_deleted`, `job`, `job_progress`, `job_logs`) plus `resync`, sent after every
// (re)connect: events missed while disconnected are not replayed, so views reload
// their snapshot then. `state` listeners hear connecting / live / reconnecting.

import { readEventStream, eventData } from './sse.js';
import { session } from './session.js';

/** Exponential backoff with jitter: 1 s, 1.6 s, 2.6 s … capped at 10 s, ±20 %. */
export class Backoff {
  constructor(baseMs = 1000, maxMs = 10000, factor = 1.6) {
    Object.assign(this, { baseMs, maxMs, factor, attempt: 0 });
  }

  next() {
    const raw = Math.min(this.maxMs, this.baseMs * this.factor ** this.attempt);
    this.attempt += 1;
    return Math.round(raw * (0.8 + Math.random() * 0.4));
  }

  reset() {
    this.attempt = 0;
  }
}

// The server pings every 15 s; silence for this long means a dead connection.
const WATCHDOG_MS = 40000;

class LiveFeed {
  constructor(url) {
    this.url = url;
    this.handlers = new Map();
    this.stateListeners = new Set();
    this.backoff = new Backoff();
    this.state = 'stopped';
    this.retryAt = null;
    this.controller = null;
    this.retryTimer = null;
    this.watchdog = null;
    this.generation = 0;
    window.addEventListener('online', () => this.state === 'reconnecting' && this.retryNow());
  }

  on(kind, handler) {
    if (!this.handlers.has(kind)) this.handlers.set(kind, new Set());
    this.handlers.get(kind).add(handler);
    return () => this.handlers.get(kind)?.delete(handler);
  }

  onState(listener) {
    this.stateListeners.add(listener);
    listener(this.state, this.retryAt);
    return () => this.stateListeners.delete(listener);
  }

  emit(kind, data) {
    for (const handler of this.handlers.get(kind) ?? []) {
      try {
        handler(data);
      } catch (error) {
        console.error(`live ${kind} handler failed`, error);
      }
    }
  }

  setState(state, retryAt = null) {
    this.state = state;
    this.retryAt = retryAt;
    for (const listener of this.stateListeners) listener(state, retryAt);
  }

  start() {
    if (this.state === 'connecting' || this.state === 'live') return;
    this.connect();
  }

  stop() {
    this.generation += 1;
    clearTimeout(this.retryTimer);
    clearTimeout(this.watchdog);
    this.controller?.abort();
    this.controller = null;
    this.setState('stopped');
  }

  retryNow() {
    clearTimeout(this.retryTimer);
    this.controller?.abort();
    this.connect();
  }

  feedWatchdog() {
    clearTimeout(this.watchdog);
    this.watchdog = setTimeout(() => this.controller?.abort(), WATCHDOG_MS);
  }

  async connect() {
    const generation = ++this.generation;
    const controller = new AbortController();
    this.controller = controller;
    this.setState('connecting');
    let failure = null;
    try {
      await readEventStream(this.url, {
        token: session.token,
        signal: controller.signal,
        onOpen: () => this.feedWatchdog(),
        onBytes: () => this.feedWatchdog(),
        onEvent: (event) => this.dispatch(event, controller),
      });
    } catch (error) {
      failure = error;
    }
    clearTimeout(this.watchdog);
    if (generation !== this.generation) return; // stopped or replaced meanwhile
    if (failure?.status === 401) {
      this.setState('stopped');
      session.signOut(session.ended());
      return;
    }
    const delay = this.backoff.next();
    this.setState('reconnecting', Date.now() + delay);
    this.retryTimer = setTimeout(() => this.connect(), delay);
  }

  dispatch(event, controller) {
    const data = eventData(event);
    if (event.type === 'hello') {
      this.backoff.reset();
      this.setState('live');
      this.emit('resync', data);
      return;
    }
    if (event.type === 'overflow') {
      // The server dropped us for falling behind: reconnect and reload.
      controller.abort();
      return;
    }
    if (event.type === 'ping' || data === null) return;
    this.emit(event.type, data);
  }
}

export const live = new LiveFeed('/api/events');
