// The signed-in API token, for this browser tab only (sessionStorage), and what the
// token was found not to be allowed to do (learnt from 403s, so each is asked once).

const TOKEN_KEY = 'tunefleet.token';
const DENIED_KEY = 'tunefleet.denied';

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

  signIn(token) {
    sessionStorage.setItem(TOKEN_KEY, token);
    sessionStorage.removeItem(DENIED_KEY);
  },

  /** Forget the token; `reason` is shown on the sign-in form. */
  signOut(reason = '') {
    sessionStorage.removeItem(TOKEN_KEY);
    sessionStorage.removeItem(DENIED_KEY);
    for (const listener of listeners) listener(reason);
  },

  onSignOut(listener) {
    listeners.add(listener);
    return () => listeners.delete(listener);
  },

  /** false when the server said 403 for this permission; true otherwise (not yet known). */
  may(permission) {
    return !readDenied().has(permission);
  },

  deny(permission) {
    const denied = readDenied();
    denied.add(permission);
    sessionStorage.setItem(DENIED_KEY, JSON.stringify([...denied]));
  },
};
