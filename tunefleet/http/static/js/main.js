// Entry point: sign-in, the live connection indicator, and the router.

import { request } from './api.js';
import { fleet } from './fleet.js';
import { live } from './live.js';
import { startRouter, stopRouter } from './router.js';
import { approvalsCount } from './views/approvals.js';
import { session } from './session.js';

const $ = (id) => document.getElementById(id);
const app = $('app');
const main = $('main');
const signin = $('signin');
const form = $('signin-form');
const tokenInput = $('signin-token');
const usernameInput = $('signin-username');
const passwordInput = $('signin-password');
const signinError = $('signin-error');
const signinButton = $('signin-submit');

function showError(message) {
  signinError.textContent = message;
  signinError.hidden = !message;
  tokenInput.setAttribute('aria-invalid', message ? 'true' : 'false');
  passwordInput.setAttribute('aria-invalid', message ? 'true' : 'false');
}

function showSignIn(reason = '') {
  stopRouter();
  approvalsCount.stop();
  live.stop();
  fleet.reset();
  app.hidden = true;
  signin.hidden = false;
  document.title = 'Sign in · tunefleet';
  showError(reason);
  usernameInput.focus();
}

function showApp() {
  signin.hidden = true;
  app.hidden = false;
  tokenInput.value = '';
  passwordInput.value = '';
  showError('');
  live.start();
  approvalsCount.start();
  startRouter(main);
}

/** A user name and password: the server answers with a session cookie and its CSRF token. */
async function signInWithPassword(username, password) {
  try {
    const me = await request('POST', '/api/auth/login', {
      body: { username, password }, token: null, signOutOn401: false,
    });
    session.signInWithSession(me.csrf_token, me.user, me.permissions);
    showApp();
  } catch (error) {
    showError(error.status === 401 || error.status === 429
      ? error.detail
      : `Could not sign in: ${error.detail}`);
    passwordInput.select();
  }
}

form.addEventListener('submit', async (event) => {
  event.preventDefault();
  const token = tokenInput.value.trim();
  const username = usernameInput.value.trim();
  if (!token && !(username && passwordInput.value)) {
    showError('Enter your user name and password, or paste an API token.');
    (username ? passwordInput : usernameInput).focus();
    return;
  }
  signinButton.disabled = true;
  signinButton.textContent = 'Checking…';
  if (!token) {
    await signInWithPassword(username, passwordInput.value);
    signinButton.disabled = false;
    signinButton.textContent = 'Sign in';
    return;
  }
  try {
    // Any valid token may ask who it is: the check of the token, and what it may do,
    // so the page hides what the token could not do anyway.
    const me = await request('GET', '/api/auth/whoami', { token, signOutOn401: false });
    session.signIn(token, me.permissions);
    showApp();
  } catch (error) {
    showError(error.status === 401
      ? 'That token was not accepted: it is wrong, revoked, or for another orchestrator.'
      : `Could not sign in: ${error.detail}`);
    tokenInput.select();
  } finally {
    signinButton.disabled = false;
    signinButton.textContent = 'Sign in';
  }
});

$('signout').addEventListener('click', async () => {
  if (session.csrf) {
    // End the session on the server too; the tab signs out whatever it answers.
    await request('POST', '/api/auth/logout', { signOutOn401: false }).catch(() => {});
  }
  session.signOut('');
});
session.onSignOut((reason) => showSignIn(reason));

// --- the connection indicator ---------------------------------------------------------

const conn = $('conn');
const connText = $('conn-text');
const banner = $('banner');
const bannerCountdown = $('banner-countdown');
let countdown = null;

const LABELS = { live: 'Live', connecting: 'Connecting…', reconnecting: 'Disconnected', stopped: 'Offline' };

live.onState((state, retryAt) => {
  clearInterval(countdown);
  const paint = () => {
    conn.dataset.state = state;
    connText.textContent = LABELS[state] ?? state;
    banner.hidden = state !== 'reconnecting';
    // Not announced (aria-hidden): a screen reader hears the banner once, not every second.
    const seconds = Math.max(0, Math.ceil(((retryAt ?? 0) - Date.now()) / 1000));
    bannerCountdown.textContent = seconds > 0 ? `Reconnecting in ${seconds} s…` : 'Reconnecting…';
  };
  paint();
  main.classList.toggle('stale', state === 'reconnecting');
  if (state === 'reconnecting') countdown = setInterval(paint, 1000);
});
$('banner-retry').addEventListener('click', () => live.retryNow());

/** A new tab of a browser already signed in with a password: the cookie is there, and
 * GET /api/auth/session hands this tab the session's CSRF token. */
async function resumeSession() {
  try {
    const me = await request('GET', '/api/auth/session', { token: null, signOutOn401: false });
    if (me.csrf_token) {
      session.signInWithSession(me.csrf_token, me.user, me.permissions);
      showApp();
      return;
    }
  } catch {
    // No session (or none left): sign in.
  }
  showSignIn();
}

if (session.signedIn) showApp();
else resumeSession();
