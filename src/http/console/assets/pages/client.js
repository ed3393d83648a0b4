// One client (or offline session): who it is, its TLS identity, queue and in-flight window,
// subscriptions; kick it off.

import { api } from '../api.js';
import { h, table, message, when, status } from '../ui.js';

export async function render(main, [ns, id], me) {
  const path = `/sessions/${ns}/${encodeURIComponent(id)}`;
  const s = await api('GET', path);
  const result = h('div', { id: 'kick-result' });
  const facts = [
    ['Client id', s.client_id], ['Namespace', s.namespace], ['State', s.online ? 'connected' : 'offline'],
    ['User', s.username || 'anonymous'], ['Authenticated by', s.provider || ''], ['Protocol', s.protocol || ''],
    ['Listener', s.listener || ''], ['Address', s.peer || ''],
    ['TLS identity', s.tls_common_name ? `certificate CN ${s.tls_common_name}` : 'no client certificate'],
    ['Connected since', when(s.connected_since)], ['Queued messages', s.queue_depth], ['In flight', s.inflight],
    ['Dropped', s.dropped], ['Session expiry', s.expiry === 'after' ? `${s.expiry_s} s after disconnect` : s.expiry.replace('_', ' ')],
  ];
  const kick = h('button', { type: 'button', class: 'danger', disabled: !s.online || me.scope !== 'admin' }, 'Kick (close the connection)');
  kick.addEventListener('click', async () => {
    kick.disabled = true;
    try {
      await api('POST', path + '/kick');
      result.replaceChildren(message(`${s.client_id} was disconnected.`, 'ok'));
      status(`Kicked ${s.client_id}`);
    } catch (err) {
      result.replaceChildren(message(`${err.message}`, 'error'));
      kick.disabled = false;
    }
  });
  main.append(
    h('p', {}, h('a', { href: '/console/clients' }, '← All clients')),
    h('h1', {}, `Client ${s.client_id}`),
    h('dl', { class: 'facts' }, facts.map(([k, v]) => [h('dt', {}, k), h('dd', {}, String(v))])),
    h('div', { class: 'actions' }, kick), result,
    h('h2', {}, 'Subscriptions'),
    s.subscription_list.length === 0 ? h('p', {}, 'No subscription.') :
      table(`${s.subscription_list.length} subscription${s.subscription_list.length === 1 ? "" : "s"}`, ['Filter', ['QoS', 'num'], 'No local', 'Retain as published'],
        s.subscription_list.map((sub) => h('tr', {}, h('td', {}, h('code', {}, sub.filter)), h('td', { class: 'num' }, sub.qos),
          h('td', {}, sub.no_local ? 'yes' : 'no'), h('td', {}, sub.retain_as_published ? 'yes' : 'no')))));
}
