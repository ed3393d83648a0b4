// Retained messages: filter by topic filter (paged by the server), view one whole, delete.

import { api, query } from '../api.js';
import { h, field, table, values, message, status, Pager } from '../ui.js';

export async function render(main, _params, me) {
  const form = h('form', { class: 'card', role: 'search', 'aria-label': 'Filter retained messages' },
    h('div', { class: 'row' }, field('Topic filter', 'filter', { type: 'search', value: '#' }),
      h('div', {}, h('button', { type: 'submit' }, 'Filter'))));
  const list = h('div', { id: 'retained-list' });
  const view = h('div', { id: 'retained-view' });
  let filter = '#';
  const seg = (topic) => '/retained/' + encodeURIComponent(topic);
  const pager = new Pager(
    (cursor) => api('GET', '/retained' + query({ limit: 50, cursor, filter })),
    (items) => list.replaceChildren(items.length === 0 ? h('p', { id: 'retained-none' }, 'No retained message matches.') :
      table('Retained messages', ['Topic', ['QoS', 'num'], ['Bytes', 'num'], 'Preview', 'Actions'], items.map((r) => h('tr', {},
        h('td', {}, h('code', {}, r.topic)), h('td', { class: 'num' }, r.qos), h('td', { class: 'num' }, r.payload_bytes),
        h('td', {}, r.preview + (r.truncated ? '…' : '')),
        h('td', {}, h('div', { class: 'actions' },
          h('button', { type: 'button', class: 'secondary', 'aria-label': `View ${r.topic}`, onclick: () => show(r.topic) }, 'View'),
          h('button', { type: 'button', class: 'danger', disabled: me.scope !== 'admin', 'aria-label': `Delete ${r.topic}`,
            onclick: () => remove(r.topic) }, 'Delete'))))))));
  async function show(topic) {
    try {
      const m = await api('GET', seg(topic));
      view.replaceChildren(h('section', { class: 'card', 'aria-label': `Retained message on ${topic}` },
        h('h2', {}, topic), h('p', { class: 'muted' }, `QoS ${m.qos}, ${m.payload_bytes} bytes` +
          (m.content_type ? `, ${m.content_type}` : '') + (m.expires_in_s != null ? `, expires in ${m.expires_in_s} s` : '')),
        h('pre', {}, m.payload_text ?? `(binary) ${m.payload_base64 || ''}`)));
    } catch (err) { view.replaceChildren(message(err.message, 'error')); }
  }
  async function remove(topic) {
    try {
      await api('DELETE', seg(topic));
      status(`Deleted the retained message on ${topic}`);
      view.replaceChildren(message(`Deleted the retained message on ${topic}.`, 'ok'));
      await pager.show(pager.cursor);
    } catch (err) { view.replaceChildren(message(err.message, 'error')); }
  }
  form.addEventListener('submit', (e) => { e.preventDefault(); filter = values(form).filter.trim() || '#'; pager.reset(); });
  main.append(h('h1', {}, 'Retained messages'), form, view, list, pager.el);
  await pager.reset();
}
