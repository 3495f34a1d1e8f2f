// Server-Sent Events over fetch() and a ReadableStream. EventSource cannot send an
// Authorization header, and the API takes tokens only there (never in URLs, where
// they would end up in logs), so the page reads the stream itself.
//
// SseParser follows the WHATWG event-stream format: lines end in CRLF, LF or CR;
// `data`, `event`, `id` and `retry` fields; ':' starts a comment; a blank line
// dispatches the event if it has data.

import { ApiError, errorFrom, followActive, UNREACHABLE } from './api.js';

export class SseParser {
  constructor() {
    this.buffer = '';
    this.data = [];
    this.type = '';
    this.lastEventId = '';
    this.retry = null;
  }

  /** Feed decoded text; returns the events it completed, as {type, data, id}. */
  feed(text) {
    this.buffer += text;
    const events = [];
    let start = 0;
    for (;;) {
      let end = start;
      while (end < this.buffer.length && this.buffer[end] !== '\n' && this.buffer[end] !== '\r') end += 1;
      if (end >= this.buffer.length) break;
      // A CR at the very end may be the first half of a CRLF: wait for the next chunk.
      if (this.buffer[end] === '\r' && end + 1 >= this.buffer.length) break;
      const line = this.buffer.slice(start, end);
      start = end + (this.buffer[end] === '\r' && this.buffer[end + 1] === '\n' ? 2 : 1);
      const event = this.line(line);
      if (event) events.push(event);
    }
    this.buffer = this.buffer.slice(start);
    return events;
  }

  /** The end of the stream: a last line without its line end still counts. */
  end() {
    const rest = this.buffer.replace(/\r$/, '');
    this.buffer = '';
    const events = [];
    if (rest) this.line(rest);
    const event = this.line('');
    if (event) events.push(event);
    return events;
  }

  line(line) {
    if (line === '') {
      if (!this.data.length) {
        this.type = '';
        return null;
      }
      const event = { type: this.type || 'message', data: this.data.join('\n'), id: this.lastEventId };
      this.data = [];
      this.type = '';
      return event;
    }
    if (line.startsWith(':')) return null;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this.data.push(value);
    else if (field === 'event') this.type = value;
    else if (field === 'id' && !value.includes('\0')) this.lastEventId = value;
    else if (field === 'retry' && /^\d+$/.test(value)) this.retry = Number(value);
    return null;
  }
}

/**
 * Open `url` as an event stream with the bearer token and call onEvent({type, data, id})
 * for each event until the stream ends (resolves) or fails (rejects with ApiError).
 * onOpen() runs once the response headers arrived with a 2xx. Abort with `signal`.
 * onBytes() runs on every chunk (keeps a watchdog fed, pings included).
 */
export async function readEventStream(url, { token, signal, onOpen, onEvent, onBytes }) {
  let response;
  try {
    response = await fetch(url, {
      // Without a token the session cookie goes along (same origin); reading needs no CSRF token.
      headers: token
        ? { Accept: 'text/event-stream', Authorization: `Bearer ${token}` }
        : { Accept: 'text/event-stream' },
      cache: 'no-store',
      signal,
    });
  } catch (error) {
    if (signal?.aborted) throw error;
    throw new ApiError(0, UNREACHABLE);
  }
  if (!response.ok) {
    const error = await errorFrom(response);
    followActive(error);
    throw error;
  }
  if (!response.body) throw new ApiError(0, 'this browser cannot read streamed responses');
  onOpen?.();
  const parser = new SseParser();
  const decoder = new TextDecoder();
  const reader = response.body.getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      onBytes?.();
      for (const event of parser.feed(decoder.decode(value, { stream: true }))) onEvent(event);
    }
    for (const event of parser.feed(decoder.decode())) onEvent(event);
    for (const event of parser.end()) onEvent(event);
  } finally {
    reader.releaseLock();
  }
}

/** JSON data of an event, or null when it is not JSON. */
export function eventData(event) {
  try {
    return JSON.parse(event.data);
  } catch {
    return null;
  }
}
