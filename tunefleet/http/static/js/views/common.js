// Pieces every page uses: the page heading, the permission note, paging.

import { h } from '../dom.js';

export function pageHead(title, subtitle, ...actions) {
  return h('div', { class: 'page-head' },
    h('div', {}, h('h1', {}, title), subtitle ? h('p', { class: 'subtitle' }, subtitle) : null),
    actions.length ? h('div', { class: 'actions' }, actions) : null);
}

export function permissionNote(permission, what) {
  return h('div', { class: 'callout info', role: 'note' },
    h('div', {},
      h('strong', {}, 'Not available with this token. '),
      `To ${what}, sign in with a token that has the `, h('code', {}, permission), ' permission.'));
}

/**
 * Previous / next paging. onPage(offset) is called with the new offset.
 * Returns {el, update({offset, limit, total, hasMore})}.
 */
export function pager(label, onPage) {
  const text = h('span', { 'aria-live': 'polite' });
  const prev = h('button', { class: 'btn small', type: 'button', 'aria-label': `Previous page of ${label}` }, '← Previous');
  const next = h('button', { class: 'btn small', type: 'button', 'aria-label': `Next page of ${label}` }, 'Next →');
  let state = { offset: 0, limit: 25 };
  prev.addEventListener('click', () => onPage(Math.max(0, state.offset - state.limit)));
  next.addEventListener('click', () => onPage(state.offset + state.limit));
  const el = h('nav', { class: 'pager', 'aria-label': `Pages of ${label}` }, prev, next);
  return {
    el,
    text,
    update({ offset, limit, total, shown, hasMore }) {
      state = { offset, limit };
      const more = hasMore ?? offset + shown < total;
      text.textContent = shown
        ? `${offset + 1}–${offset + shown}${total !== null && total !== undefined ? ` of ${total}` : ''}`
        : 'Nothing to show';
      prev.disabled = offset === 0;
      next.disabled = !more;
    },
  };
}
