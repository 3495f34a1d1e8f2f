// Webhooks: the signed-in user's subscriptions (every one with admin.webhooks), each with
// Test, Deliveries (the delivery log, with Redeliver), Rotate secret, Remove, and Enable
// when a 410 from its receiver disabled it. Add and Rotate secret show the signing secret
// once. docs/webhooks.md.

import { get, post, del, enc } from '../api.js';
import { KeyedRows, emptyState, h } from '../dom.js';
import { ago } from '../format.js';
import { confirmAction, copyButton, modal, toast } from '../ui.js';
import { pageHead } from './common.js';

const PATH = '/api/admin/webhooks';

function stateCell(hook) {
  if (hook.enabled) return h('span', { class: 'badge', 'data-status': 'idle' }, 'Enabled');
  return h('span', {},
    h('span', { class: 'badge', 'data-status': 'failed' }, 'Disabled'), ' ',
    h('span', { class: 'muted webhook-reason' }, hook.disabled_reason || ''));
}

// The signing secret, shown this once in the dialog `m` (after Add, or Rotate secret).
function showSecret(m, heading, value) {
  const secret = h('input', { id: 'webhook-secret', type: 'text', readonly: true, value, spellcheck: 'false' });
  m.heading.textContent = heading;
  m.body.replaceChildren(
    h('div', { class: 'callout', role: 'note' }, h('strong', {}, 'Copy the signing secret now: it will not be shown again. '),
      'Your receiver verifies X-Tunefleet-Signature with it (docs/webhooks.md).'),
    h('div', { class: 'field' }, h('label', { for: 'webhook-secret' }, 'Signing secret'),
      h('div', { class: 'secret' }, secret, copyButton(() => value, 'signing secret'))));
  m.foot.replaceChildren(h('button', { class: 'btn primary', type: 'button', onClick: () => m.close(true) }, 'Done'));
  secret.focus();
}

function openAdd(kinds, onDone) {
  const m = modal({ title: 'Add webhook', wide: true });
  const formId = 'add-webhook-form';
  const error = h('div', { class: 'form-error', role: 'alert', hidden: true });
  const url = h('input', { id: 'wh-url', type: 'url', required: true, placeholder: 'https://example.com/hooks/tunefleet', spellcheck: 'false' });
  const boxes = kinds.map((kind) => h('label', { class: 'choice' },
    h('input', { type: 'checkbox', name: 'event', value: kind, checked: true }), h('span', {}, kind)));
  const format = h('select', { id: 'wh-format' }, h('option', { value: 'json' }, 'JSON (the event)'), h('option', { value: 'slack' }, 'Slack (a chat message)'));
  const team = h('input', { id: 'wh-team', type: 'text', placeholder: 'any team' });
  const user = h('input', { id: 'wh-user', type: 'text', placeholder: 'any user' });
  const form = h('form', { id: formId, novalidate: true }, error,
    h('div', { class: 'field' }, h('label', { for: 'wh-url' }, 'URL'), url),
    h('fieldset', { class: 'field' }, h('legend', {}, 'Events'), h('div', { class: 'checks' }, ...boxes)),
    h('div', { class: 'field' }, h('label', { for: 'wh-format' }, 'Format'), format),
    h('div', { class: 'field' }, h('label', { for: 'wh-team' }, 'Only the jobs of team'), team),
    h('div', { class: 'field' }, h('label', { for: 'wh-user' }, 'Only the jobs of user'), user));
  m.body.append(form);
  const submit = h('button', { class: 'btn primary', type: 'submit', form: formId }, 'Add webhook');
  m.foot.append(h('button', { class: 'btn', type: 'button', onClick: () => m.close(false) }, 'Cancel'), submit);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    error.hidden = true;
    const events = boxes.map((b) => b.querySelector('input')).filter((i) => i.checked).map((i) => i.value);
    const body = { url: url.value.trim(), events, format: format.value };
    if (team.value.trim()) body.team = team.value.trim();
    if (user.value.trim()) body.user = user.value.trim();
    submit.disabled = true;
    try {
      const data = await post(PATH, body);
      showSecret(m, `Webhook ${data.id} added`, data.secret);
      onDone();
    } catch (err) {
      error.textContent = err.detail;
      error.hidden = false;
      submit.disabled = false;
    }
  });
  m.show();
  url.focus();
}

async function openDeliveries(hook) {
  const m = modal({ title: `Deliveries of webhook ${hook.id}`, wide: true });
  const tbody = h('tbody');
  const note = h('div');
  m.body.append(note, h('div', { class: 'table-wrap' }, h('table', { class: 'data', id: 'deliveries-table' },
    h('thead', {}, h('tr', {}, ['Event', 'State', 'Tries', 'Status', 'Latency', 'Error', 'Created', ''].map((t) => h('th', { scope: 'col' }, t)))),
    tbody)));
  m.foot.append(h('button', { class: 'btn', type: 'button', onClick: () => m.close() }, 'Close'));
  async function load() {
    try {
      const data = await get(`${PATH}/${hook.id}/deliveries`);
      note.replaceChildren(data.webhook.enabled ? '' : h('p', { class: 'callout' }, `Disabled: ${data.webhook.disabled_reason}`));
      tbody.replaceChildren(...data.deliveries.map((d) => h('tr', { 'data-delivery': d.delivery_id },
        h('td', {}, d.event), h('td', {}, d.state), h('td', { class: 'num' }, String(d.attempts)),
        h('td', { class: 'num' }, d.last_status == null ? '—' : String(d.last_status)),
        h('td', { class: 'num' }, d.last_latency_ms == null ? '—' : `${Math.round(d.last_latency_ms)} ms`),
        h('td', {}, d.last_error || '—'), h('td', {}, ago(d.created_at)),
        h('td', {}, h('button', { class: 'btn small', type: 'button', onClick: () => redeliver(d) }, 'Redeliver')))));
      if (!data.deliveries.length) tbody.replaceChildren(h('tr', {}, h('td', { colspan: 8 }, 'No deliveries yet.')));
    } catch (err) {
      note.replaceChildren(emptyState('Could not load the deliveries', err.detail));
    }
  }
  async function redeliver(d) {
    try {
      await post(`${PATH}/${hook.id}/deliveries/${enc(d.delivery_id)}/redeliver`);
      toast(`Redelivering ${d.event}.`, 'success');
    } catch (err) {
      toast(`Could not redeliver: ${err.detail}`, 'error');
    }
    load();
  }
  m.show();
  load();
}

export function mount(main) {
  let kinds = [];
  let loadSeq = 0;
  const tbody = h('tbody');
  const table = h('table', { class: 'data', id: 'webhooks-table' },
    h('caption', { class: 'sr-only' }, 'Webhook subscriptions'),
    h('thead', {}, h('tr', {}, ['URL', 'Format', 'Events', 'Jobs of', 'State', ''].map((t) => h('th', { scope: 'col' }, t)))),
    tbody);
  const empty = h('div');
  const add = h('button', { class: 'btn primary', type: 'button', id: 'add-webhook', onClick: () => openAdd(kinds, reload) }, 'Add webhook');
  main.append(pageHead('Webhooks', 'Signed deliveries of job, worker and budget events to other systems and chat.', add),
    h('section', { class: 'card', 'aria-label': 'Webhook subscriptions' }, h('div', { class: 'table-wrap' }, table), empty));

  async function act(hook, what) {
    try {
      if (what === 'test') {
        await post(`${PATH}/${hook.id}/test`);
        toast(`Sent a test event to webhook ${hook.id}.`, 'success');
      } else if (what === 'enable') {
        await post(`${PATH}/${hook.id}/enable`);
        toast(`Webhook ${hook.id} enabled.`, 'success');
      } else if (what === 'rotate') {
        const sure = await confirmAction({
          title: 'Rotate signing secret',
          message: `Sign what goes to ${hook.url} with a new secret from now on? Its receiver refuses deliveries until it has the new one; they are retried for 24 hours.`,
          confirmLabel: 'Rotate',
        });
        if (!sure) return;
        const data = await post(`${PATH}/${hook.id}/rotate-secret`, {});
        const m = modal({ title: 'New signing secret', wide: true });
        showSecret(m, `Webhook ${hook.id}: new signing secret`, data.secret);
        m.show();
      } else if (what === 'remove') {
        const sure = await confirmAction({ title: 'Remove webhook', message: `Remove ${hook.url} and its delivery log?`, confirmLabel: 'Remove', danger: true });
        if (!sure) return;
        await del(`${PATH}/${hook.id}`);
        toast(`Webhook ${hook.id} removed.`, 'success');
      }
    } catch (err) {
      toast(`Could not ${what} webhook ${hook.id}: ${err.detail}`, 'error');
    }
    reload();
  }

  const rows = new KeyedRows(tbody, [
    { label: 'URL', sig: (w) => w.url, render: (w) => h('code', {}, w.url) },
    { label: 'Format', sig: (w) => w.format, render: (w) => w.format },
    { label: 'Events', sig: (w) => w.events.join(','), render: (w) => (w.events.length > 3 ? `${w.events.length} events` : w.events.join(', ')) },
    { label: 'Jobs of', sig: (w) => `${w.owner}/${w.team}/${w.user}`, render: (w) => w.owner || w.user || w.team || 'everyone' },
    { label: 'State', sig: (w) => `${w.enabled}/${w.disabled_reason}`, render: stateCell },
    {
      label: '',
      sig: (w) => `${w.id}/${w.enabled}`,
      render: (w) => h('div', { class: 'btn-row' },
        w.enabled ? h('button', { class: 'btn small', type: 'button', onClick: () => act(w, 'test') }, 'Test')
          : h('button', { class: 'btn small primary', type: 'button', onClick: () => act(w, 'enable') }, 'Enable'),
        h('button', { class: 'btn small', type: 'button', onClick: () => openDeliveries(w) }, 'Deliveries'),
        h('button', { class: 'btn small', type: 'button', onClick: () => act(w, 'rotate') }, 'Rotate secret'),
        h('button', { class: 'btn small danger', type: 'button', onClick: () => act(w, 'remove') }, 'Remove')),
    },
  ], (w) => String(w.id));

  async function reload() {
    const seq = ++loadSeq;
    try {
      const data = await get(PATH);
      if (seq !== loadSeq) return;
      kinds = data.events;
      rows.update(data.webhooks);
      table.hidden = data.webhooks.length === 0;
      empty.replaceChildren(data.webhooks.length ? '' : emptyState('No webhooks', 'Add one to be told when jobs finish, fail or need approval.'));
    } catch (err) {
      if (seq !== loadSeq) return;
      table.hidden = true;
      empty.replaceChildren(emptyState('Could not load the webhooks', err.detail));
    }
  }
  reload();
  return {};
}
