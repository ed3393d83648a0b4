// Builtin users: find by name prefix (paged by the server), add one.

import { api, query } from '../api.js';
import { h, field, table, values, message, status, Pager } from '../ui.js';
import { navigate } from '../app.js';

export const userHref = (name) => `/console/users/${encodeURIComponent(name)}`;

export async function render(main, _params, me) {
  const search = h('form', { class: 'card', role: 'search', 'aria-label': 'Find users' },
    h('div', { class: 'row' }, field('Name starts with', 'prefix', { type: 'search' }),
      h('div', {}, h('button', { type: 'submit' }, 'Search'))));
  const list = h('div', { id: 'user-list' });
  let prefix = '';
  const pager = new Pager(
    (cursor) => api('GET', '/users' + query({ limit: 50, cursor, prefix })),
    (items) => list.replaceChildren(items.length === 0 ? h('p', {}, 'No user matches.') :
      table('Builtin users', ['Name', 'Kind', 'State', 'Access', ['Rules', 'num']], items.map((u) => h('tr', {},
        h('td', {}, h('a', { href: userHref(u.username) }, u.username)), h('td', {}, u.auth_type === 'x509' ? 'certificate (x509)' : 'password'),
        h('td', {}, u.disabled ? 'disabled' : 'enabled'), h('td', {}, u.unrestricted ? 'unrestricted' : 'by rules'),
        h('td', { class: 'num' }, u.rules))))));
  search.addEventListener('submit', (e) => { e.preventDefault(); prefix = values(search).prefix.trim(); pager.reset(); });

  const result = h('div', {});
  const add = h('form', { class: 'card', 'aria-labelledby': 'add-user-title' },
    h('h2', { id: 'add-user-title' }, 'Add a user'),
    h('div', { class: 'row' },
      field('Name', 'username', { required: true }),
      field('Kind', 'auth_type', { options: [['basic', 'password'], ['x509', 'certificate (x509, no password)']] }),
      field('Password', 'password', { type: 'password', autocomplete: 'new-password' }),
      field('Unrestricted (no rules apply)', 'unrestricted', { type: 'checkbox' }),
      h('div', {}, h('button', { type: 'submit', disabled: me.scope !== 'admin' }, 'Add user'))),
    result);
  add.addEventListener('submit', async (e) => {
    e.preventDefault();
    const v = values(add);
    const body = { username: v.username.trim(), auth_type: v.auth_type, unrestricted: v.unrestricted };
    if (v.auth_type === 'basic') body.password = v.password;
    try {
      const u = await api('POST', '/users', body);
      status(`Added user ${u.username}`);
      await navigate(userHref(u.username));
    } catch (err) { result.replaceChildren(message(err.message, 'error')); }
  });
  main.append(h('h1', {}, 'Users'), add, h('h2', {}, 'All users'), search, list, pager.el);
  await pager.reset();
}
