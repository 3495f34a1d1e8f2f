// The submit form, with a preview of which connected workers would qualify, computed
// in the page with the scheduler's rules (matching.js) as the form changes.

import { get, post } from '../api.js';
import { badge, fill, h } from '../dom.js';
import { fleet, isConnected } from '../fleet.js';
import { qualify } from '../matching.js';
import { jobHref } from '../router.js';
import { keyValueEditor, toast } from '../ui.js';
import { session } from '../session.js';
import { permissionNote } from './common.js';

const TARGETS = [
  ['auto', 'Auto', 'a remote worker if one qualifies, else the orchestrator'],
  ['worker', 'Remote worker', 'remote workers only'],
  ['local', 'Local', "the orchestrator's own GPUs"],
];

function numberField(id, label, { min, max, step = 1, placeholder = '', hint = '' } = {}) {
  const input = h('input', {
    id, type: 'number', min, max, step, placeholder, inputmode: step === 1 ? 'numeric' : 'decimal',
    'aria-describedby': hint ? `${id}-hint` : null,
  });
  return {
    input,
    el: h('div', { class: 'field span-2' }, h('label', { for: id }, label), input,
      hint ? h('p', { class: 'hint', id: `${id}-hint` }, hint) : null),
  };
}

const numberOrNull = (input) => (input.value.trim() === '' ? null : Number(input.value));

/** Returns {el, destroy()}; onSubmitted(response) runs after a successful submit. */
export function submitPanel({ onSubmitted }) {
  const error = h('div', { class: 'form-error', role: 'alert', hidden: true });
  const config = h('select', { id: 'sj-config', required: true, 'aria-describedby': 'sj-config-hint' },
    h('option', { value: '' }, 'Loading configurations…'));
  const configHint = h('p', { class: 'hint', id: 'sj-config-hint' }, "From the orchestrator's configs directory.");
  const name = h('input', { id: 'sj-name', type: 'text', maxlength: 128, autocomplete: 'off', placeholder: 'the configuration name' });
  // Without queue.local the orchestrator's own machine is not offered, and auto means
  // remote workers only (the server queues it so).
  const mayLocal = session.may('queue.local');
  const targets = mayLocal ? TARGETS : TARGETS.filter(([value]) => value !== 'local').map(
    ([value, label, title]) => [value, label, value === 'auto' ? 'remote workers only: this token lacks queue.local' : title]);
  const target = h('div', { class: 'segmented', role: 'radiogroup', 'aria-labelledby': 'sj-target-legend' },
    targets.map(([value, label, title], i) => h('label', { title },
      h('input', { type: 'radio', name: 'sj-target', value, checked: i === 0, onChange: preview }),
      h('span', {}, label))));
  const gpuCount = numberField('sj-gpus', 'GPU count', { min: 0, max: 1024, placeholder: 'from the config' });
  const minVram = numberField('sj-vram', 'Min VRAM per GPU (GB)', { min: 0, step: 0.1, placeholder: 'any' });
  const gpuName = h('input', { id: 'sj-gpuname', type: 'text', maxlength: 128, autocomplete: 'off', spellcheck: 'false', placeholder: '*A100*' });
  const priority = numberField('sj-priority', 'Priority', { min: -100, max: 100, placeholder: '0 (higher first)' });
  const retries = numberField('sj-retries', 'Retries', { min: 0, max: 20, placeholder: 'server default' });
  const timeout = numberField('sj-timeout', 'Timeout (minutes)', { min: 0, step: 1, placeholder: 'none' });
  const labels = keyValueEditor({
    name: 'label requirement', valueLabel: 'glob', keyPlaceholder: 'gpu_type', valuePlaceholder: 'a100*', onChange: preview,
  });
  const submit = h('button', { class: 'btn primary', type: 'submit', id: 'sj-submit' }, 'Submit job');

  const form = h('form', { class: 'form-col', novalidate: true, 'aria-label': 'Submit a job' },
    error,
    h('div', { class: 'fields six' },
      h('div', { class: 'field span-4' }, h('label', { for: 'sj-config' }, 'Configuration'), config, configHint),
      h('div', { class: 'field span-2' }, h('label', { for: 'sj-name' }, 'Job name (optional)'), name),
      h('div', { class: 'field span-6' }, h('span', { class: 'label', id: 'sj-target-legend' }, 'Run on'), target),
      gpuCount.el,
      minVram.el,
      h('div', { class: 'field span-2' }, h('label', { for: 'sj-gpuname' }, 'GPU name (glob)'), gpuName),
      priority.el,
      retries.el,
      timeout.el,
      h('fieldset', { class: 'field span-6' },
        h('legend', {}, 'Label requirements'),
        h('p', { class: 'hint legend-hint' }, 'Every label must match: * any text, ? one character, [ab] a set. Case-sensitive.'),
        labels.el)),
    h('div', { class: 'submit-actions' }, submit));

  const previewBody = h('div', { 'aria-live': 'polite', id: 'sj-preview' });
  const side = h('div', { class: 'preview-col' }, h('h3', {}, 'Would run on'), previewBody);
  const el = h('div', { class: 'submit-grid' }, form, side);

  for (const input of [gpuCount.input, minVram.input, gpuName]) input.addEventListener('input', preview);

  function requirements() {
    return {
      target: form.querySelector('input[name="sj-target"]:checked').value,
      labels: labels.value(),
      gpu_count: numberOrNull(gpuCount.input) ?? 0,
      min_vram_gb: numberOrNull(minVram.input),
      gpu_name: gpuName.value.trim() || null,
    };
  }

  function preview() {
    if (fleet.denied) {
      previewBody.replaceChildren(permissionNote('admin.workers', 'see which workers would qualify'));
      return;
    }
    if (!fleet.loaded) {
      previewBody.replaceChildren(h('p', { class: 'muted' }, 'Loading workers…'));
      return;
    }
    const req = requirements();
    const connected = fleet.list().filter(isConnected);
    const { yes, no, next } = qualify(req, connected);
    const summary = connected.length === 0
      ? h('p', { class: 'qualify-summary none' }, 'No worker is connected.')
      : h('p', { class: `qualify-summary ${yes.length ? 'some' : 'none'}`, id: 'sj-qualify-count' },
        `${yes.length} of ${connected.length} connected worker${connected.length === 1 ? '' : 's'} qualif${yes.length === 1 ? 'ies' : 'y'}`);
    const nextLine = yes.length
      ? h('p', { class: 'muted' }, next
        ? ['Idle now: it would start at once on ', h('b', {}, next.name), '.']
        : 'None is idle: it would wait for one of them.')
      : connected.length ? h('p', { class: 'muted' }, 'It would wait until a qualifying worker connects.') : null;
    const assumed = gpuCount.input.value.trim() === ''
      ? h('p', { class: 'hint' }, "GPU count left empty: shown as needing none; the config's num_processes, if it has one, applies when submitted.") : null;
    fill(previewBody,
      summary, nextLine, assumed,
      yes.length ? h('ul', { class: 'qualify-list', 'aria-label': 'Qualifying workers' },
        yes.map((w) => h('li', {}, h('span', { class: 'name' }, w.name), badge(w.status)))) : null,
      no.length ? h('details', { class: 'unqualified' },
        h('summary', {}, `${no.length} not qualifying`),
        h('ul', { class: 'qualify-list' }, no.map(({ worker, reason }) => h('li', {},
          h('div', {}, h('div', { class: 'name' }, worker.name), h('div', { class: 'why' }, reason)))))) : null,
    );
  }

  async function loadConfigs() {
    try {
      const data = await get('/api/configs');
      const options = data.configs.map((c) => h('option', { value: c.name }, c.name));
      if (options.length) {
        config.replaceChildren(h('option', { value: '' }, 'Choose a configuration…'), ...options);
        configHint.textContent = `${options.length} in the orchestrator's configs directory.`;
      } else {
        config.replaceChildren(h('option', { value: '' }, 'No configurations found'));
        configHint.textContent = "Add configurations to the orchestrator's configs directory (--configs-dir).";
      }
    } catch (err) {
      config.replaceChildren(h('option', { value: '' }, 'Could not load configurations'));
      configHint.textContent = err.detail;
    }
  }

  function body() {
    const out = { config_name: config.value, target: requirements().target, worker_labels: labels.value() };
    const optional = {
      name: name.value.trim() || null,
      gpu_count: numberOrNull(gpuCount.input),
      min_vram_gb: numberOrNull(minVram.input),
      gpu_name: gpuName.value.trim() || null,
      priority: numberOrNull(priority.input),
      max_retries: numberOrNull(retries.input),
      timeout_minutes: numberOrNull(timeout.input),
    };
    for (const [key, value] of Object.entries(optional)) if (value !== null) out[key] = value;
    return out;
  }

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    error.hidden = true;
    if (!config.value) {
      error.textContent = 'Choose a configuration to run.';
      error.hidden = false;
      config.focus();
      return;
    }
    submit.disabled = true;
    try {
      const result = await post('/api/queue/submit', body());
      const where = result.allocated_worker_id
        ? `dispatched to ${fleet.nameOf(result.allocated_worker_id)}`
        : `queued${result.queue_position ? ` at position ${result.queue_position}` : ''}${result.reason ? `: ${result.reason}` : ''}`;
      // A link, so the new job is one click away (the toast stays longer to allow it).
      toast(['Job ', h('a', { href: jobHref(result.job_id) }, result.job_id), ` submitted, ${where}.`],
        'success', 10_000);
      // The team's `warn` budget is spent: the job runs, and the submitter is told.
      if (result.budget_warning) toast(`Budget: ${result.budget_warning}.`, 'warn', 15_000);
      onSubmitted?.(result);
    } catch (err) {
      error.textContent = err.detail;
      error.hidden = false;
    } finally {
      submit.disabled = false;
    }
  });

  const unsubscribe = fleet.subscribe(preview);
  loadConfigs();
  preview();
  return { el, focus: () => config.focus(), destroy: unsubscribe };
}
