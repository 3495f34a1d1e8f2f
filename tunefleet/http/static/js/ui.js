// Shared widgets: toasts, modal dialogs (confirmations), copy buttons, label editors.

import { h } from './dom.js';

// --- toasts ------------------------------------------------------------------------------

export function toast(message, kind = 'info', timeoutMs = kind === 'error' ? 9000 : 5000) {
  const region = document.getElementById('toasts');
  const close = h('button', { class: 'btn ghost small', type: 'button', 'aria-label': 'Dismiss' }, '✕');
  const el = h('div', { class: `toast ${kind}` }, h('p', {}, message), close);
  const remove = () => el.remove();
  close.addEventListener('click', remove);
  region.append(el);
  setTimeout(remove, timeoutMs);
  return el;
}

// --- dialogs -----------------------------------------------------------------------------

/**
 * A modal <dialog>: focus moves into it, Escape closes it, focus returns to where it was.
 * Returns {dialog, body, foot, close(value)}; `closed` resolves with the value given to close.
 */
export function modal({ title, wide = false, onClose } = {}) {
  const opener = document.activeElement;
  const titleId = `dlg-${Math.random().toString(36).slice(2, 9)}`;
  const body = h('div', { class: 'dialog-body' });
  const foot = h('div', { class: 'dialog-foot' });
  const closeButton = h('button', { class: 'btn ghost small', type: 'button', 'aria-label': 'Close' }, '✕');
  const heading = h('h2', { id: titleId }, title);
  const dialog = h('dialog', { class: wide ? 'wide' : '', 'aria-labelledby': titleId },
    h('div', { class: 'dialog-head' }, heading, closeButton), body, foot);
  let resolve;
  const closed = new Promise((r) => { resolve = r; });
  let result;
  const close = (value) => {
    result = value;
    if (dialog.open) dialog.close();
  };
  closeButton.addEventListener('click', () => close(undefined));
  dialog.addEventListener('close', () => {
    dialog.remove();
    onClose?.(result);
    resolve(result);
    if (opener && opener.isConnected && typeof opener.focus === 'function') opener.focus();
  });
  document.body.append(dialog);
  return { dialog, body, foot, heading, close, closed, show: () => dialog.showModal() };
}

/** Ask before doing something; resolves true when confirmed. */
export function confirmAction({ title, message, confirmLabel = 'Confirm', danger = false }) {
  const m = modal({ title });
  const cancel = h('button', { class: 'btn', type: 'button', onClick: () => m.close(false) }, 'Cancel');
  const ok = h('button', {
    class: danger ? 'btn danger solid' : 'btn primary', type: 'button', onClick: () => m.close(true),
  }, confirmLabel);
  m.body.append(...[message].flat().map((part) => (typeof part === 'string' ? h('p', {}, part) : part)));
  m.foot.append(cancel, ok);
  m.show();
  // The harmless choice has focus, so Enter on a dangerous dialog does nothing rash.
  (danger ? cancel : ok).focus();
  return m.closed.then((value) => value === true);
}

// --- copy --------------------------------------------------------------------------------

async function writeClipboard(text) {
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch {
      // Denied (no user gesture, policy): fall back below.
    }
  }
  const scratch = h('textarea', { class: 'sr-only', readonly: true, 'aria-hidden': 'true' });
  scratch.value = text;
  document.body.append(scratch);
  scratch.select();
  let ok = false;
  try {
    ok = document.execCommand('copy');
  } catch {
    ok = false;
  }
  scratch.remove();
  return ok;
}

export function copyButton(getText, what) {
  const button = h('button', { class: 'btn small', type: 'button', 'aria-label': `Copy ${what}` }, 'Copy');
  button.addEventListener('click', async () => {
    const ok = await writeClipboard(getText());
    button.textContent = ok ? 'Copied' : 'Select and copy';
    setTimeout(() => { button.textContent = 'Copy'; }, 1800);
  });
  return button;
}

// --- key/value rows (labels, label requirements) ----------------------------------------------

/**
 * Editable key = value rows. `valueLabel` names the value column for screen readers
 * ("value" for labels, "glob" for requirements). onChange() fires on every edit.
 */
export function keyValueEditor({ name, valueLabel = 'value', keyPlaceholder = 'key', valuePlaceholder = 'value', onChange = () => {} }) {
  const rows = h('div', { class: 'kv-rows' });
  let count = 0;
  const addRow = (key = '', value = '') => {
    count += 1;
    const n = count;
    const keyInput = h('input', {
      type: 'text', value: key, placeholder: keyPlaceholder, 'aria-label': `${name} ${n} key`,
      autocomplete: 'off', spellcheck: 'false', onInput: onChange,
    });
    const valueInput = h('input', {
      type: 'text', value, placeholder: valuePlaceholder, 'aria-label': `${name} ${n} ${valueLabel}`,
      autocomplete: 'off', spellcheck: 'false', onInput: onChange,
    });
    const remove = h('button', { class: 'btn ghost small', type: 'button', 'aria-label': `Remove ${name} ${n}` }, '✕');
    const row = h('div', { class: 'kv-row' }, keyInput, h('span', { class: 'eq', 'aria-hidden': 'true' }, '='), valueInput, remove);
    remove.addEventListener('click', () => {
      row.remove();
      onChange();
      add.focus();
    });
    rows.append(row);
    return keyInput;
  };
  const add = h('button', { class: 'btn small', type: 'button' }, `+ Add ${name}`);
  add.addEventListener('click', () => addRow().focus());
  const el = h('div', {}, rows, h('div', { class: 'btn-row' }, add));
  el.classList.add('kv-editor');
  return {
    el,
    addRow,
    /** {key: value} of the filled rows; blank rows are ignored. */
    value() {
      const out = {};
      for (const row of rows.children) {
        const [k, , v] = row.children;
        const key = k.value.trim();
        if (key) out[key] = v.value.trim();
      }
      return out;
    },
    clear() {
      rows.replaceChildren();
    },
  };
}
