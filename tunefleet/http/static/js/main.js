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
const signinError = $('signin-error');
const signinButton = $('signin-submit');

function showError(message) {
  signinError.textContent = message;
  signinError.hidden = !message;
  tokenInput.setAttribute('aria-invalid', message ? 'true' : 'false');
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
  tokenInput.focus();
}

function showApp() {
  signin.hidden = true;
  app.hidden = false;
  tokenInput.value = '';
  showError('');
  live.start();
  approvalsCount.start();
  startRouter(main);
}

form.addEventListener('submit', async (event) => {
  event.preventDefault();
  const token = tokenInput.value.trim();
  if (!token) {
    showError('Paste an API token first.');
    tokenInput.focus();
    return;
  }
  signinButton.disabled = true;
  signinButton.textContent = 'Checking…';
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

$('signout').addEventListener('click', () => session.signOut(''));
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

if (session.token) showApp();
else showSignIn();
