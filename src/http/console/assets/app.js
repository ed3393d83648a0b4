// The console's shell: who is logged in, client-side navigation between pages under
// /console, and the login, first-run and log-out flows. Each page is a module in pages/ with
// `render(main, params)`, which may return a cleanup function (e.g. to close a stream).

import { api, ApiError, setCsrf } from './api.js';
import { h, field, message, values, status } from './ui.js';

const ROUTES = [
  [/^\/console\/?$/, 'dashboard', 'Dashboard'],
  [/^\/console\/clients\/?$/, 'clients', 'Clients'],
  [/^\/console\/clients\/(mqtt|relay)\/(.+)$/, 'client', 'Client'],
  [/^\/console\/sessions\/?$/, 'sessions', 'Sessions'],
  [/^\/console\/users\/?$/, 'users', 'Users'],
  [/^\/console\/users\/(.+)$/, 'user', 'User'],
  [/^\/console\/acl\/?$/, 'acl', 'ACL tester'],
  [/^\/console\/routing\/?$/, 'routing', 'Content routing'],
  [/^\/console\/grants\/?$/, 'grants', 'Grants'],
  [/^\/console\/retained\/?$/, 'retained', 'Retained messages'],
];

const main = () => document.getElementById('main');
let cleanup = null;
let me = null;
// The first view of a load keeps the browser's own focus start (the skip link comes first);
// later views move focus to the new content, as a page load would for a screen reader.
let navigated = false;
// Said on the next login page (why it is shown), then forgotten.
let loginNotice = null;

function showChrome(on) {
  document.getElementById('nav').hidden = !on;
  document.getElementById('account').hidden = !on;
}

function markCurrent(path) {
  for (const a of document.querySelectorAll('#nav a')) {
    const href = a.getAttribute('href');
    const current = href === '/console' ? /^\/console\/?$/.test(path) : path.startsWith(href);
    if (current) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
}

export function navigate(path, replace) {
  if (replace) history.replaceState(null, '', path); else history.pushState(null, '', path);
  return route();
}

// Handles an error of any page: a lost session goes back to the login page.
export function handle(err, where) {
  // A lost session is handled by the 'mesgd:unauthenticated' listener below.
  if (err instanceof ApiError && err.code === 'unauthenticated') return;
  if (err instanceof ApiError && err.code === 'no_admin') { me = null; return route(); }
  const text = err instanceof ApiError ? `${err.message} (${err.code})` : String(err);
  (where || main()).append(message(text, 'error'));
  status(text);
}

async function who() {
  try {
    me = await api('GET', '/whoami');
    setCsrf(me.csrf_token || null);
    return 'in';
  } catch (err) {
    if (err instanceof ApiError && err.code === 'no_admin') return 'no_admin';
    if (err instanceof ApiError && err.code === 'unauthenticated') return 'out';
    throw err;
  }
}

async function route() {
  if (cleanup) { try { cleanup(); } catch { /* a page's cleanup must not stop navigation */ } cleanup = null; }
  const el = main();
  const path = location.pathname;
  document.getElementById('status').textContent = '';
  if (!me) {
    let state;
    try { state = await who(); } catch (err) { el.replaceChildren(message(String(err), 'error')); return; }
    if (state === 'no_admin') return noAdmin(el);
    if (state === 'out') return login(el);
  }
  showChrome(true);
  document.getElementById('whoami').textContent = `${me.name} (${me.scope})`;
  markCurrent(path);
  const found = ROUTES.find(([re]) => re.test(path));
  if (!found) {
    document.title = 'Not found · mesgd console';
    el.replaceChildren(h('h1', {}, 'Not found'), h('p', {}, 'No console page at this address. ',
      h('a', { href: '/console' }, 'Go to the dashboard')));
    return;
  }
  const [re, name, title] = found;
  const params = path.match(re).slice(1).map(decodeURIComponent);
  document.title = `${title} · mesgd console`;
  el.replaceChildren(h('p', {}, 'Loading…'));
  try {
    const page = await import(`./pages/${name}.js`);
    el.replaceChildren();
    cleanup = (await page.render(el, params, me)) || null;
  } catch (err) {
    handle(err, el);
  }
  if (navigated) el.focus({ preventScroll: true });
  navigated = true;
}

function noAdmin(el) {
  showChrome(false);
  document.title = 'Create an administrator · mesgd console';
  el.replaceChildren(h('section', { class: 'login' },
    h('h1', {}, 'No administrator yet'),
    h('p', {}, 'This mesgd has no administrator account, so nobody can log in to the console or use the REST API yet. ' +
      'Create the first one on the server, with the same configuration file the server uses:'),
    h('pre', {}, h('code', {}, 'mesgd admin add NAME')),
    h('p', {}, 'It asks for the password twice (or reads it from standard input with ',
      h('code', {}, '--password-stdin'), '). Add ', h('code', {}, '--role read'),
      ' for an account that may look but not change. Then come back here.'),
    h('button', { type: 'button', onclick: () => route() }, 'I have created one: log in')));
}

function login(el) {
  showChrome(false);
  document.title = 'Log in · mesgd console';
  const result = h('div', { id: 'login-result' });
  if (loginNotice) { result.append(message(loginNotice)); loginNotice = null; }
  const form = h('form', { class: 'card login', 'aria-labelledby': 'login-title' },
    h('h1', { id: 'login-title' }, 'Log in to mesgd'),
    field('Administrator name', 'username', { required: true, autocomplete: 'username' }),
    field('Password', 'password', { type: 'password', required: true, autocomplete: 'current-password' }),
    h('p', {}, h('button', { type: 'submit' }, 'Log in')),
    result);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const button = form.querySelector('button');
    button.disabled = true;
    result.replaceChildren();
    try {
      const { csrf_token: loginToken } = await api('GET', '/login');
      const v = values(form);
      const session = await api('POST', '/login', { username: v.username, password: v.password },
        { 'X-CSRF-Token': loginToken });
      setCsrf(session.csrf_token);
      me = { name: session.username, scope: session.role, csrf_token: session.csrf_token };
      if (/^\/console\/login/.test(location.pathname)) history.replaceState(null, '', '/console');
      await route();
      status(`Logged in as ${session.username}`);
    } catch (err) {
      let text;
      if (err instanceof ApiError && err.code === 'bad_credentials') text = 'Wrong name or password.';
      else if (err instanceof ApiError && err.code === 'locked') {
        text = `Too many failed logins: logins are refused for ${err.retryAfter || 'a few'} more seconds.`;
      } else text = err instanceof ApiError ? `${err.message} (${err.code})` : String(err);
      result.replaceChildren(message(text, 'error'));
      button.disabled = false;
      form.querySelector('input[name=password]').select();
    }
  });
  el.replaceChildren(form);
  form.querySelector('input').focus();
}

async function logout() {
  try { await api('POST', '/logout'); } catch (err) { if (!(err instanceof ApiError)) throw err; }
  me = null;
  setCsrf(null);
  history.pushState(null, '', '/console');
  await route();
  status('Logged out');
}

document.addEventListener('click', (event) => {
  const a = event.target.closest('a');
  if (!a || event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || !url.pathname.startsWith('/console') || a.target) return;
  event.preventDefault();
  navigate(url.pathname + url.search);
});
window.addEventListener('popstate', () => route());
// Only when logged in: while `who()` asks, `me` is null, so its own 401 does not loop back here.
window.addEventListener('mesgd:unauthenticated', () => {
  if (!me) return;
  me = null;
  setCsrf(null);
  loginNotice = 'Your session ended: log in again.';
  route();
});
document.getElementById('logout').addEventListener('click', logout);
route();
