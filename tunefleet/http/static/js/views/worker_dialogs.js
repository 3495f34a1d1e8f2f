// Create a worker, and show a worker token once (after creating or rotating it).

import { post } from '../api.js';
import { h } from '../dom.js';
import { copyButton, keyValueEditor, modal } from '../ui.js';

const NAME = /^[A-Za-z0-9._-]{1,64}$/;

function shellQuote(value) {
  return /^[A-Za-z0-9_./:@%+=,-]+$/.test(value) ? value : `'${value.replaceAll("'", "'\\''")}'`;
}

function environmentText(environment) {
  const lines = Object.entries(environment).map(([k, v]) => `export ${k}=${shellQuote(v)}`);
  return [...lines, 'tunefleet worker'].join('\n');
}

/** The token, the exact command and the environment form, with copy buttons. */
export function renderToken(m, data, { heading }) {
  m.heading.textContent = heading;
  const tokenInput = h('input', {
    id: 'worker-token', type: 'text', readonly: true, value: data.token, spellcheck: 'false',
    'aria-describedby': 'token-once',
  });
  tokenInput.addEventListener('focus', () => tokenInput.select());
  const env = environmentText(data.environment || {});
  m.body.replaceChildren(
    h('div', { class: 'callout', id: 'token-once', role: 'note' },
      h('div', {},
        h('strong', {}, 'Copy the token now: it will not be shown again. '),
        'tunefleet keeps only its hash. If it is lost, rotate the token to get a new one.')),
    h('div', { class: 'field' },
      h('label', { for: 'worker-token' }, 'Worker token'),
      h('div', { class: 'secret' }, tokenInput, copyButton(() => data.token, 'worker token'))),
    h('div', { class: 'field' },
      h('span', { class: 'label', id: 'cmd-label' }, 'Start the agent on the GPU machine'),
      h('div', { class: 'secret' },
        h('pre', { class: 'codeblock', id: 'worker-command', 'aria-labelledby': 'cmd-label' }, data.connection_command),
        copyButton(() => data.connection_command, 'command'))),
    h('div', { class: 'field' },
      h('span', { class: 'label', id: 'env-label' }, 'Or with environment variables'),
      h('div', { class: 'secret' },
        h('pre', { class: 'codeblock', id: 'worker-env', 'aria-labelledby': 'env-label' }, env),
        copyButton(() => env, 'environment variables'))),
  );
  const done = h('button', { class: 'btn primary', type: 'button', onClick: () => m.close(true) }, 'Done');
  m.foot.replaceChildren(done);
  tokenInput.focus();
}

/** Opens the Create worker dialog; resolves when it closes. */
export function openCreateWorker() {
  const m = modal({ title: 'Create worker', wide: true });
  const formId = 'create-worker-form';
  const error = h('div', { class: 'form-error', role: 'alert', hidden: true });
  const name = h('input', {
    id: 'cw-name', name: 'name', type: 'text', required: true, maxlength: 64, autocomplete: 'off',
    spellcheck: 'false', placeholder: 'gpu-worker-1', 'aria-describedby': 'cw-name-hint',
  });
  const choice = (value, title, text, checked) => h('label', { class: 'choice' },
    h('input', { type: 'radio', name: 'worker_type', value, checked }),
    h('span', {}, h('strong', {}, title), h('span', { class: 'muted' }, text)));
  const labels = keyValueEditor({ name: 'label', keyPlaceholder: 'gpu_type', valuePlaceholder: 'a100' });
  const form = h('form', { id: formId, novalidate: true },
    error,
    h('div', { class: 'field' },
      h('label', { for: 'cw-name' }, 'Name'),
      name,
      h('p', { class: 'hint', id: 'cw-name-hint' }, "Letters, digits, '.', '_' and '-', up to 64 characters.")),
    h('fieldset', { class: 'field' },
      h('legend', {}, 'Type'),
      choice('persistent', 'Persistent', 'Stays connected and takes job after job.', true),
      choice('ephemeral', 'Ephemeral', 'Runs one job, then shuts down (spot and cloud machines).', false)),
    h('fieldset', { class: 'field' },
      h('legend', {}, 'Labels'),
      h('p', { class: 'hint' }, 'Jobs can require labels with globs, e.g. gpu_type = a100*. These win over labels the agent reports.'),
      labels.el),
  );
  m.body.append(form);
  const submit = h('button', { class: 'btn primary', type: 'submit', form: formId }, 'Create worker');
  m.foot.append(h('button', { class: 'btn', type: 'button', onClick: () => m.close(false) }, 'Cancel'), submit);

  const fail = (message, field) => {
    error.textContent = message;
    error.hidden = false;
    if (field) {
      field.setAttribute('aria-invalid', 'true');
      field.focus();
    }
  };

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    error.hidden = true;
    name.removeAttribute('aria-invalid');
    const value = name.value.trim();
    if (!NAME.test(value)) {
      fail("Give the worker a name of letters, digits, '.', '_' or '-' (up to 64 characters).", name);
      return;
    }
    const workerType = form.querySelector('input[name="worker_type"]:checked').value;
    submit.disabled = true;
    try {
      const data = await post('/api/admin/workers', { name: value, worker_type: workerType, labels: labels.value() });
      renderToken(m, data, { heading: `Worker ${data.name} created` });
    } catch (err) {
      fail(err.detail);
      submit.disabled = false;
    }
  });
  m.show();
  name.focus();
  return m.closed;
}

/** After a rotation: the new token, once. */
export function showRotatedToken(worker, data) {
  const m = modal({ title: '', wide: true });
  renderToken(m, data, { heading: `New token for ${worker.name}` });
  m.show();
  m.dialog.querySelector('#worker-token').focus();
  return m.closed;
}
