// Hash routes (#/workers, #/queue?status=running, #/jobs/<id>, #/usage, #/audit): the server
// serves one page at `/`, and links and the back button work without it knowing.

import * as workers from './views/workers.js';
import * as queue from './views/queue.js';
import * as job from './views/job.js';
import * as audit from './views/audit.js';
import * as usage from './views/usage.js';
import * as users from './views/users.js';
import * as approvals from './views/approvals.js';
import * as webhooks from './views/webhooks.js';

const ROUTES = [
  { nav: 'workers', pattern: /^\/workers$/, view: workers, title: 'Workers' },
  { nav: 'queue', pattern: /^\/queue$/, view: queue, title: 'Queue' },
  { nav: 'queue', pattern: /^\/jobs\/([\w.:-]+)$/, view: job, title: 'Job' },
  { nav: 'usage', pattern: /^\/usage$/, view: usage, title: 'Usage' },
  { nav: 'audit', pattern: /^\/audit$/, view: audit, title: 'Audit' },
  { nav: 'users', pattern: /^\/users$/, view: users, title: 'Users & Teams' },
  { nav: 'approvals', pattern: /^\/approvals$/, view: approvals, title: 'Approvals' },
  { nav: 'webhooks', pattern: /^\/webhooks$/, view: webhooks, title: 'Webhooks' },
];

let main = null;
let current = null;
let firstRender = true;

function parse() {
  const raw = location.hash.replace(/^#/, '') || '/workers';
  const [path, search = ''] = raw.split('?');
  return { path, params: new URLSearchParams(search) };
}

function render() {
  const { path, params } = parse();
  let route = null;
  let args = [];
  for (const candidate of ROUTES) {
    const match = candidate.pattern.exec(path);
    if (match) {
      route = candidate;
      args = match.slice(1).map(decodeURIComponent);
      break;
    }
  }
  if (!route) {
    location.replace('#/workers');
    return;
  }
  const key = `${path}`;
  if (current && current.key === key && current.instance.update) {
    current.instance.update(params);
    return;
  }
  current?.instance.unmount?.();
  main.replaceChildren();
  main.classList.remove('stale');
  for (const link of document.querySelectorAll('[data-nav]')) {
    if (link.dataset.nav === route.nav) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  document.title = `${route.title} · tunefleet`;
  const instance = route.view.mount(main, { args, params }) ?? {};
  current = { key, instance };
  window.scrollTo(0, 0);
  // Tell screen readers the page changed; not on first load, where the browser does.
  if (!firstRender) main.focus({ preventScroll: true });
  firstRender = false;
}

export function startRouter(mainEl) {
  main = mainEl;
  firstRender = true;
  window.addEventListener('hashchange', render);
  render();
}

export function stopRouter() {
  window.removeEventListener('hashchange', render);
  current?.instance.unmount?.();
  current = null;
  main?.replaceChildren();
}

/** Change only the query of the current route (filters, paging), keeping history tidy. */
export function setParams(params) {
  const { path } = parse();
  const search = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== '' && v !== null && v !== undefined) search.set(k, v);
  const text = search.toString();
  location.hash = `#${path}${text ? `?${text}` : ''}`;
}

export const jobHref = (id) => `#/jobs/${encodeURIComponent(id)}`;
