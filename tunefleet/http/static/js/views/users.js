// Users & Teams: changing one's own password (anyone signed in), and for admins
// (admin.users) the users and teams over /api/admin/users and /api/admin/teams: create a
// user, set a role, disable or enable, set a password, add and remove team members, and
// set a team's GPU quota (issue 25) with what it uses, borrows and its fair-share standing.

import { enc, get, post, request } from '../api.js';
import { badge, emptyState, h } from '../dom.js';
import { session } from '../session.js';
import { toast } from '../ui.js';
import { pageHead, permissionNote } from './common.js';

const ROLES = ['viewer', 'researcher', 'lead', 'admin'];

/** Run a change; say what went wrong in a toast, and reload what it changed. */
async function change(what, fn, after) {
  let message = what;
  let kind = 'success';
  try {
    await fn();
  } catch (error) {
    message = error.detail ?? String(error);
    kind = 'error';
  }
  // The toast once the tables show the change, so what it says is what is on the page.
  await after?.();
  toast(message, kind);
}

function field(id, label, input) {
  input.id = id;
  return h('div', { class: 'field' }, h('label', { for: id }, label), input);
}

function ownPasswordCard() {
  const current = h('input', { type: 'password', autocomplete: 'current-password' });
  const fresh = h('input', { type: 'password', autocomplete: 'new-password', minlength: '10' });
  const form = h('form', { class: 'filters', 'aria-label': 'Change your password' },
    field('own-current', 'Current password', current),
    field('own-new', 'New password (10 characters or more)', fresh),
    h('div', { class: 'btn-row' }, h('button', { class: 'btn primary', type: 'submit' }, 'Change my password')));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    await change('Your password was changed; your other sessions have ended.', async () => {
      const me = await post('/api/auth/password', {
        current_password: current.value, new_password: fresh.value,
      });
      // A page signed in with a password continues in the session the change opened.
      if (me.csrf_token) session.signInWithSession(me.csrf_token, me.user, me.permissions);
      current.value = '';
      fresh.value = '';
    });
  });
  return h('section', { class: 'card', 'aria-label': 'Your password' },
    h('div', { class: 'card-body' }, h('h2', {}, 'Your password'), form));
}

function userRow(user, reload) {
  const role = h('select', { 'aria-label': `Role of ${user.name}` },
    ROLES.map((r) => h('option', { value: r, selected: r === user.role }, r)));
  const password = h('input', {
    type: 'password', autocomplete: 'new-password', 'aria-label': `New password for ${user.name}`,
    placeholder: 'new password',
  });
  const path = `/api/admin/users/${enc(user.name)}`;
  return h('tr', { dataset: { user: user.name } },
    h('td', {}, h('b', {}, user.name)),
    h('td', {}, role, ' ', h('button', {
      class: 'btn small', type: 'button',
      onClick: () => change(`${user.name} is now ${role.value}.`, () => post(`${path}/role`, { role: role.value }), reload),
    }, 'Set role')),
    h('td', {}, user.teams.map((t) => t.name + (t.default ? ' (default)' : '')).join(', ') || '—'),
    h('td', {}, badge(user.disabled ? 'offline' : 'idle', user.disabled ? 'disabled' : 'enabled')),
    h('td', {}, h('button', {
      class: 'btn small', type: 'button',
      onClick: () => change(
        `${user.name} ${user.disabled ? 'enabled' : 'disabled'}.`,
        () => post(`${path}/${user.disabled ? 'enable' : 'disable'}`),
        reload,
      ),
    }, user.disabled ? 'Enable' : 'Disable')),
    h('td', {}, password, ' ', h('button', {
      class: 'btn small', type: 'button',
      onClick: () => change(`Set the password of ${user.name}.`, () => post(`${path}/password`, { password: password.value }), reload),
    }, 'Set password')));
}

/** '8 GPUs; *A100*=8; weight 2; borrow ≤4', as `tunefleet teams list` shows it. */
function quotaText(quota) {
  if (!quota) return '—';
  const parts = [];
  if (quota.gpus !== null && quota.gpus !== undefined) parts.push(`${quota.gpus} GPUs`);
  for (const [glob, count] of Object.entries(quota.flavors ?? {})) parts.push(`${glob}=${count}`);
  if (quota.weight !== 1) parts.push(`weight ${quota.weight}`);
  if (quota.borrow_limit !== null && quota.borrow_limit !== undefined) parts.push(`borrow ≤${quota.borrow_limit}`);
  return parts.join('; ') || '—';
}

/** '*A100*=8, *H100*=4' → {"*A100*": 8, "*H100*": 4}; a malformed part is sent as is
 *  (a count of -1) so the server's one-line reason says what to fix. */
function parseFlavors(text) {
  const flavors = {};
  for (const part of text.split(',').map((p) => p.trim()).filter(Boolean)) {
    const at = part.lastIndexOf('=');
    const count = at > 0 ? Number(part.slice(at + 1)) : NaN;
    flavors[at > 0 ? part.slice(0, at).trim() : part] = Number.isInteger(count) ? count : -1;
  }
  return flavors;
}

function quotaCell(team, share, reload) {
  const quota = share?.quota ?? { gpus: null, flavors: {}, weight: 1, borrow_limit: null };
  const number = (label, value, step) => h('input', {
    type: 'number', min: '0', step, value: value ?? '', 'aria-label': `${label} of ${team.name}`, class: 'narrow',
  });
  const gpus = number('GPU quota', quota.gpus, '1');
  const weight = number('Weight', quota.weight, 'any');
  const borrow = number('Borrowing limit', quota.borrow_limit, '1');
  const flavors = h('input', {
    type: 'text', placeholder: '*A100*=8', 'aria-label': `Flavor quotas of ${team.name}`,
    value: Object.entries(quota.flavors ?? {}).map(([g, c]) => `${g}=${c}`).join(', '),
  });
  const path = `/api/admin/teams/${enc(team.name)}/quota`;
  const save = async () => {
    const body = {
      gpus: gpus.value === '' ? null : Number(gpus.value),
      flavors: parseFlavors(flavors.value),
      weight: weight.value === '' ? 1 : Number(weight.value),
      borrow_limit: borrow.value === '' ? null : Number(borrow.value),
    };
    const answer = await post(path, body);
    for (const warning of answer.warnings ?? []) toast(warning, 'info', 9000);
  };
  const use = share ? `uses ${share.used_gpus}, borrows ${share.borrowed_gpus}, standing ${Math.round(share.standing)}` : 'uses 0';
  return h('td', { class: 'quota' },
    h('div', {}, h('b', {}, quotaText(share?.quota)), ' ', h('span', { class: 'muted' }, use)),
    h('div', { class: 'btn-row' }, gpus, flavors, weight, borrow,
      h('button', {
        class: 'btn small', type: 'button',
        onClick: () => change(`Set the quota of ${team.name}.`, save, reload),
      }, 'Set quota'),
      h('button', {
        class: 'btn small', type: 'button',
        onClick: () => change(`Cleared the quota of ${team.name}.`, () => request('DELETE', path), reload),
      }, 'Clear quota')));
}

function teamRow(team, share, reload) {
  const member = h('input', { type: 'text', placeholder: 'user name', 'aria-label': `Add a member to ${team.name}` });
  const path = `/api/admin/teams/${enc(team.name)}/members`;
  return h('tr', { dataset: { team: team.name } },
    h('td', {}, h('b', {}, team.name)),
    h('td', {}, team.members.length ? team.members.map((m) => h('span', { class: 'member' },
      m.user, ' ', h('button', {
        class: 'btn small', type: 'button', 'aria-label': `Remove ${m.user} from ${team.name}`,
        onClick: () => change(`Removed ${m.user} from ${team.name}.`, () => request('DELETE', `${path}/${enc(m.user)}`), reload),
      }, '×'), ' ')) : '—'),
    h('td', {}, member, ' ', h('button', {
      class: 'btn small', type: 'button',
      onClick: () => change(`Added ${member.value} to ${team.name}.`, () => post(path, { user: member.value.trim() }), reload),
    }, 'Add member')),
    quotaCell(team, share, reload));
}

function createUserForm(reload) {
  const name = h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false' });
  const role = h('select', {}, ROLES.map((r) => h('option', { value: r, selected: r === 'researcher' }, r)));
  const team = h('input', { type: 'text', placeholder: 'default', autocomplete: 'off' });
  const form = h('form', { class: 'filters', 'aria-label': 'Create a user' },
    field('new-user-name', 'Name', name), field('new-user-role', 'Role', role),
    field('new-user-team', 'Team', team),
    h('div', { class: 'btn-row' }, h('button', { class: 'btn primary', type: 'submit' }, 'Create user')));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const teams = team.value.trim() ? [team.value.trim()] : [];
    await change(`Created user ${name.value}.`, () => post('/api/admin/users', { name: name.value.trim(), role: role.value, teams }), reload);
  });
  return form;
}

export function mount(main) {
  const usersBody = h('tbody');
  const teamsBody = h('tbody');
  const admin = h('div');
  main.append(pageHead('Users & Teams', 'Who may use the fleet, in which teams, with which role'),
    ownPasswordCard(), admin);

  async function reload() {
    if (!session.may('admin.users')) {
      admin.replaceChildren(permissionNote('admin.users', 'manage users and teams'));
      return;
    }
    try {
      const [{ users }, { teams }, stats] = await Promise.all(
        [get('/api/admin/users'), get('/api/admin/teams'), get('/api/queue/stats')]);
      const shares = stats.fair_share ?? {};
      usersBody.replaceChildren(...users.map((u) => userRow(u, reload)));
      teamsBody.replaceChildren(...teams.map((t) => teamRow(t, shares[t.name], reload)));
      if (!teams.length) teamsBody.replaceChildren(h('tr', {}, h('td', { colspan: '4' }, emptyState('No teams', ''))));
    } catch (error) {
      if (error.permission) admin.replaceChildren(permissionNote('admin.users', 'manage users and teams'));
      else toast(error.detail ?? String(error), 'error');
    }
  }

  admin.append(
    h('section', { class: 'card', 'aria-label': 'Users' }, h('div', { class: 'card-body' },
      h('h2', {}, 'Users'), createUserForm(reload),
      h('table', { class: 'data', id: 'users-table' },
        h('thead', {}, h('tr', {}, ['User', 'Role', 'Teams', 'State', '', 'Password'].map((t) => h('th', { scope: 'col' }, t)))),
        usersBody))),
    h('section', { class: 'card', 'aria-label': 'Teams' }, h('div', { class: 'card-body' },
      h('h2', {}, 'Teams'),
      h('table', { class: 'data', id: 'teams-table' },
        h('thead', {}, h('tr', {}, ['Team', 'Members', '', 'GPU quota (GPUs, flavors, weight, borrowing limit)'].map((t) => h('th', { scope: 'col' }, t)))),
        teamsBody))));
  reload();
  return {};
}
