// The signed-in API token, for this browser tab only (sessionStorage), the permissions
// it holds (GET /api/auth/whoami at sign-in), and what it was found not to be allowed
// to do (learnt from 403s, so each is asked once). A person who signed in with a password
// holds no token: the server keeps their session (an HttpOnly cookie no script can read),
// and this tab keeps the session's CSRF token, sent on every change (X-CSRF-Token).

const TOKEN_KEY = 'tunefleet.token';
const DENIED_KEY = 'tunefleet.denied';
const HELD_KEY = 'tunefleet.permissions';
const CSRF_KEY = 'tunefleet.csrf';
const USER_KEY = 'tunefleet.user';

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

  /** The CSRF token of a password sign-in's session; null when signed in with a token. */
  get csrf() {
    return sessionStorage.getItem(CSRF_KEY);
  },

  get user() {
    return sessionStorage.getItem(USER_KEY);
  },

  get signedIn() {
    return Boolean(this.token || this.csrf);
  },

  /** What the sign-in form says when the server no longer accepts this tab. */
  ended() {
    return this.csrf
      ? 'Your session has ended (signed out elsewhere, expired, or your account changed). Sign in again.'
      : 'Your token is no longer accepted (revoked or rotated?). Sign in again.';
  },

  /** Signed in with a password: the server holds the session, this tab its CSRF token. */
  signInWithSession(csrf, user, permissions = null) {
    sessionStorage.removeItem(TOKEN_KEY);
    sessionStorage.setItem(CSRF_KEY, csrf);
    sessionStorage.setItem(USER_KEY, user);
    sessionStorage.removeItem(DENIED_KEY);
    if (permissions) sessionStorage.setItem(HELD_KEY, JSON.stringify(permissions));
    else sessionStorage.removeItem(HELD_KEY);
  },

  signIn(token, permissions = null) {
    sessionStorage.removeItem(CSRF_KEY);
    sessionStorage.removeItem(USER_KEY);
    sessionStorage.setItem(TOKEN_KEY, token);
    sessionStorage.removeItem(DENIED_KEY);
    if (permissions) sessionStorage.setItem(HELD_KEY, JSON.stringify(permissions));
    else sessionStorage.removeItem(HELD_KEY);
  },

  /** Forget the token; `reason` is shown on the sign-in form. */
  signOut(reason = '') {
    // Several requests may find the session ended at once: the first says why.
    if (!this.signedIn) return;
    sessionStorage.removeItem(TOKEN_KEY);
    sessionStorage.removeItem(CSRF_KEY);
    sessionStorage.removeItem(USER_KEY);
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
