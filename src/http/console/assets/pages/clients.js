// Connected clients: searched and paged by the server (client id prefix, user name, protocol),
// fifty a page; each links to its detail page.

import { api, query } from '../api.js';
import { h, field, table, values, when, Pager } from '../ui.js';

export function clientLink(s) {
  return h('a', { href: `/console/clients/${s.namespace}/${encodeURIComponent(s.client_id)}` }, s.client_id);
}

export async function render(main) {
  const form = h('form', { class: 'card', role: 'search', 'aria-label': 'Find clients' },
    h('div', { class: 'row' },
      field('Client id starts with', 'client_id', { type: 'search' }),
      field('User name', 'username', { type: 'search' }),
      field('Protocol', 'protocol', { options: [['', 'any'], ['mqtt-5', 'MQTT 5'], ['mqtt-3.1.1', 'MQTT 3.1.1'],
        ['mqtt-3.1', 'MQTT 3.1'], ['relay', 'JSON relay']] }),
      h('div', {}, h('button', { type: 'submit' }, 'Search'))));
  const list = h('div', { id: 'client-list' });
  let filter = {};
  const pager = new Pager(
    (cursor) => api('GET', '/sessions' + query({ online: true, limit: 50, cursor, ...filter })),
    (items) => list.replaceChildren(items.length === 0 ? h('p', {}, 'No connected client matches.') :
      table('Connected clients', ['Client id', 'User', 'Protocol', 'Listener', 'Address', 'Connected since',
        ['Subscriptions', 'num'], ['Queued', 'num']], items.map((s) => h('tr', {},
        h('td', {}, clientLink(s)), h('td', {}, s.username || h('span', { class: 'muted' }, 'anonymous')),
        h('td', {}, s.protocol), h('td', {}, s.listener), h('td', {}, s.peer || ''), h('td', {}, when(s.connected_since)),
        h('td', { class: 'num' }, s.subscriptions), h('td', { class: 'num' }, s.queue_depth))))));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const v = values(form);
    filter = { client_id: v.client_id.trim(), username: v.username.trim(), protocol: v.protocol };
    pager.reset();
  });
  main.append(h('h1', {}, 'Clients'), form, list, pager.el);
  await pager.reset();
}
