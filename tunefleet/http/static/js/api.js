// The public HTTP API with the session's bearer token. Errors carry the server's
// one-line `detail`; a 401 signs the tab out, a 403 is remembered per permission, and a
// standby orchestrator's 503 moves the tab to the active one it names.

import { session } from './session.js';

export class ApiError extends Error {
  constructor(status, detail, activeUrl = null) {
    super(detail);
    this.status = status;
    this.detail = detail;
    this.activeUrl = activeUrl;
    const denied = status === 403 ? /^Permission denied: ([\w.]+)/.exec(detail) : null;
    this.permission = denied ? denied[1] : null;
  }
}

export const UNREACHABLE = 'cannot reach the orchestrator; is it running?';

export async function errorFrom(response) {
  let detail = `${response.status} ${response.statusText}`.trim();
  let activeUrl = null;
  try {
    const body = await response.json();
    if (body && typeof body.detail === 'string') detail = body.detail;
    if (body && typeof body.active_url === 'string') activeUrl = body.active_url;
  } catch {
    // Not JSON (a proxy's error page): keep the status line.
  }
  return new ApiError(response.status, detail, activeUrl);
}

/**
 * A standby (or stepped-down) orchestrator answered 503 naming the active one: open the
 * same view there. The token stays behind (it is kept per site), so the tab signs in again.
 */
export function followActive(error) {
  if (error.status !== 503 || !error.activeUrl) return false;
  let target;
  try {
    target = new URL(location.pathname + location.search + location.hash, error.activeUrl);
  } catch {
    return false;
  }
  if (target.origin === location.origin) return false;
  location.assign(target.href);
  return true;
}

/**
 * One API call. `token` overrides the session's (the sign-in check uses it), and
 * `signOutOn401` is off there, since a wrong token is not an expired session.
 */
export async function request(method, path, { body, token = session.token, signOutOn401 = true } = {}) {
  const headers = { Accept: 'application/json' };
  if (token) headers.Authorization = `Bearer ${token}`;
  // Signed in with a password: the cookie goes along by itself, and a change carries the
  // session's CSRF token, without which the server refuses it (403).
  else if (session.csrf && !['GET', 'HEAD'].includes(method)) headers['X-CSRF-Token'] = session.csrf;
  const init = { method, headers, cache: 'no-store' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch {
    throw new ApiError(0, UNREACHABLE);
  }
  if (!response.ok) {
    const error = await errorFrom(response);
    if (error.status === 401 && signOutOn401) session.signOut(session.ended());
    if (error.permission) session.deny(error.permission);
    followActive(error);
    throw error;
  }
  return response.status === 204 ? null : response.json();
}

/**
 * Save what `path` answers as a file. A plain link cannot send the bearer token, so the
 * bytes are fetched with it and handed to the browser as a blob URL.
 */
export async function download(path, filename) {
  const headers = {};
  if (session.token) headers.Authorization = `Bearer ${session.token}`;
  let response;
  try {
    response = await fetch(path, { headers, cache: 'no-store' });
  } catch {
    throw new ApiError(0, UNREACHABLE);
  }
  if (!response.ok) {
    const error = await errorFrom(response);
    if (error.status === 401) session.signOut(session.ended());
    throw error;
  }
  const url = URL.createObjectURL(await response.blob());
  saveLink(url, filename);
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

/**
 * Have the browser save what `url` answers, as a click on a download link would: a
 * navigation, so the page's connect-src does not apply, and it carries no token. For a
 * URL of another origin (a bucket's presigned URL) the browser goes by the response's
 * Content-Disposition; no Referer is sent there.
 */
export function saveLink(url, filename) {
  const link = document.createElement('a');
  link.href = url;
  link.download = filename;
  link.rel = 'noopener noreferrer';
  link.hidden = true;
  document.body.append(link);
  link.click();
  link.remove();
}

export const get = (path) => request('GET', path);
export const post = (path, body = {}) => request('POST', path, { body });
export const del = (path) => request('DELETE', path);

/** ?a=1&b=2 from an object, leaving out empty values. */
export function query(params) {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value === null || value === undefined || value === '') continue;
    search.set(key, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : '';
}

export const enc = encodeURIComponent;
