// Sessions, connected or kept for a client that is away (persistent sessions): list, filter,
// and delete an offline one (a connected one must be kicked first).

import { api, query } from '../api.js';
import { h, field, table, values, message, status, Pager } from '../ui.js';
import { clientLink } from './clients.js';

export async function render(main, _params, me) {
  const form = h('form', { class: 'card', role: 'search', 'aria-label': 'Find sessions' },
    h('div', { class: 'row' },
      field('Client id starts with', 'client_id', { type: 'search' }),
      field('State', 'online', { options: [['false', 'offline (kept for a client)'], ['', 'all'], ['true', 'connected']], value: 'false' }),
      h('div', {}, h('button', { type: 'submit' }, 'Show'))));
  const list = h('div', { id: 'session-list' });
  const result = h('div', {});
  let filter = { online: 'false' };
  const pager = new Pager(
    (cursor) => api('GET', '/sessions' + query({ limit: 50, cursor, ...filter })),
    (items) => list.replaceChildren(items.length === 0 ? h('p', {}, 'No session matches.') :
      table('Sessions', ['Client id', 'Namespace', 'State', ['Subscriptions', 'num'], ['Queued', 'num'], 'Expiry', 'Actions'],
        items.map((s) => {
          const del = h('button', { type: 'button', class: 'danger', disabled: s.online || me.scope !== 'admin',
            'aria-label': `Delete session ${s.client_id}` }, 'Delete');
          del.addEventListener('click', async () => {
            try {
              await api('DELETE', `/sessions/${s.namespace}/${encodeURIComponent(s.client_id)}`);
              status(`Deleted session ${s.client_id}`);
              result.replaceChildren(message(`Session ${s.client_id} deleted.`, 'ok'));
              await pager.show(pager.cursor);
            } catch (err) { result.replaceChildren(message(err.message, 'error')); }
          });
          return h('tr', {}, h('td', {}, clientLink(s)), h('td', {}, s.namespace), h('td', {}, s.online ? 'connected' : 'offline'),
            h('td', { class: 'num' }, s.subscriptions), h('td', { class: 'num' }, s.queue_depth),
            h('td', {}, s.expiry === 'after' ? `${s.expiry_s} s` : s.expiry.replace('_', ' ')), h('td', {}, del));
        }))));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const v = values(form);
    filter = { client_id: v.client_id.trim(), online: v.online };
    pager.reset();
  });
  main.append(h('h1', {}, 'Sessions'), form, result, list, pager.el);
  await pager.reset();
}
