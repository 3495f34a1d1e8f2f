// A job's stored outputs and checkpoints (GET /api/queue/ID/artifacts), each file with
// a download. The page first asks where the file is (?redirect=false): a bucket's
// presigned URL is opened as a link, without the token (fetching it would break the
// page's connect-src 'self'); the orchestrator's own URL is fetched with the bearer
// token into a blob, since a link cannot send it.

import { ApiError, download, enc, get, saveLink } from '../api.js';
import { h } from '../dom.js';
import { ago, bytes, dateTime } from '../format.js';
import { toast } from '../ui.js';

/** The key's path for a URL: each segment encoded, the slashes kept. */
export const keyPath = (key) => key.split('/').map(enc).join('/');
const fileName = (key) => key.split('/').pop() || key;

export function artifactsPanel(jobId) {
  const body = h('div', { class: 'card-body stack', id: 'job-artifacts' },
    h('p', { class: 'muted' }, 'Loading…'));
  const count = h('span', { class: 'muted small' });
  const el = h('section', { class: 'card', 'aria-labelledby': 'artifacts-title' },
    h('div', { class: 'card-head' }, h('h2', { id: 'artifacts-title' }, 'Artifacts'), count), body);

  async function save(key, button) {
    button.disabled = true;
    button.textContent = 'Downloading…';
    try {
      const link = await get(`/api/queue/${enc(jobId)}/artifacts/${keyPath(key)}?redirect=false`);
      if (link.presigned) saveLink(link.url, fileName(key));
      else if (new URL(link.url, location.href).origin === location.origin) await download(link.url, fileName(key));
      else throw new ApiError(0, 'the orchestrator named another site for this file; the token is not sent there');
    } catch (error) {
      toast(`${key}: ${error.detail}`, 'error');
    } finally {
      button.disabled = false;
      button.textContent = 'Download';
    }
  }

  function checkpointList(checkpoints) {
    if (!checkpoints.length) return null;
    return [
      h('h3', { class: 'small' }, 'Checkpoints'),
      h('ul', { class: 'artifact-list', 'aria-label': 'Checkpoints' }, checkpoints.map((c) =>
        h('li', { dataset: { checkpoint: c.name } },
          h('span', { class: 'mono' }, c.name),
          h('span', { class: 'muted' }, `step ${c.step} · attempt ${c.attempt} · ${bytes(c.bytes)}`),
          h('span', { class: 'muted', title: dateTime(c.created_at) }, ago(c.created_at))))),
    ];
  }

  function fileTable(artifacts) {
    if (!artifacts.length) return null;
    return h('div', { class: 'table-wrap' }, h('table', { class: 'data artifact-table', 'aria-label': 'Stored files' },
      h('thead', {}, h('tr', {}, ['File', 'Size', 'Attempt', 'Stored', ''].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, artifacts.map((a) => {
        const button = h('button', { class: 'btn small', type: 'button', 'aria-label': `Download ${a.key}` }, 'Download');
        button.addEventListener('click', () => save(a.key, button));
        return h('tr', { dataset: { key: a.key } },
          h('td', { class: 'mono key', title: a.sha256 ? `SHA-256 ${a.sha256}` : '' }, a.key),
          h('td', { class: 'num' }, bytes(a.size)),
          h('td', { class: 'num' }, String(a.attempt)),
          h('td', { title: dateTime(a.created_at) }, ago(a.created_at)),
          h('td', { class: 'actions' }, button));
      }))));
  }

  let loading = null;
  return {
    el,
    /** Read the list again (cheap: one query); a failure keeps what is shown. */
    load() {
      loading ??= (async () => {
        try {
          const data = await get(`/api/queue/${enc(jobId)}/artifacts`);
          const files = data.artifacts ?? [];
          const checkpoints = data.checkpoints ?? [];
          const total = files.reduce((sum, a) => sum + (a.size || 0), 0);
          count.textContent = files.length ? `${files.length} files · ${bytes(total)}` : '';
          if (!files.length && !checkpoints.length) {
            body.replaceChildren(h('p', { class: 'muted' },
              'Nothing stored yet: the worker uploads checkpoints as they appear and the outputs when the trainer exits.'));
          } else {
            body.replaceChildren(...[checkpointList(checkpoints), fileTable(files)].flat().filter(Boolean));
          }
        } catch (error) {
          if (error.status === 404) el.hidden = true; // the job is gone, or no artifact store
          else toast(error.detail, 'error');
        } finally {
          loading = null;
        }
      })();
      return loading;
    },
  };
}
