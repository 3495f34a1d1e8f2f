// The signed-in API token, for this browser tab only (sessionStorage), the permissions
// it holds (GET /api/auth/whoami at sign-in), and what it was found not to be allowed
// to do (learnt from 403s, so each is asked once).

const TOKEN_KEY = 'tunefleet.token';
const DENIED_KEY = 'tunefleet.denied';
const HELD_KEY = 'tunefleet.permissions';

const listeners = new Set();

function readDenied() {
  try {
    return new Set(JSON.parse(sessionStorage.getItem(DENIED_KEY) || '[]'));
  } catch {
    return new Set();
  }
}

export const session = {
  get token() {
    return sessionStorage.getItem(TOKEN_KEY);
  },

  signIn(token, permissions = null) {
    sessionStorage.setItem(TOKEN_KEY, token);
    sessionStorage.removeItem(DENIED_KEY);
    if (permissions) sessionStorage.setItem(HELD_KEY, JSON.stringify(permissions));
    else sessionStorage.removeItem(HELD_KEY);
  },

  /** Forget the token; `reason` is shown on the sign-in form. */
  signOut(reason = '') {
    sessionStorage.removeItem(TOKEN_KEY);
    sessionStorage.removeItem(DENIED_KEY);
    sessionStorage.removeItem(HELD_KEY);
    for (const listener of listeners) listener(reason);
  },

  onSignOut(listener) {
    listeners.add(listener);
    return () => listeners.delete(listener);
  },

  /** false when the token lacks the permission (as whoami said, or a 403 showed). */
  may(permission) {
    if (readDenied().has(permission)) return false;
    const held = sessionStorage.getItem(HELD_KEY);
    if (!held) return true; // not known: let the server say
    try {
      return JSON.parse(held).includes(permission);
    } catch {
      return true;
    }
  },

  deny(permission) {
    const denied = readDenied();
    denied.add(permission);
    sessionStorage.setItem(DENIED_KEY, JSON.stringify([...denied]));
  },
};
