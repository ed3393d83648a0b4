// The dashboard: live gauges and message rates over server-sent events (one sample a second,
// a five-minute chart), and what each provider of the chain answered.

import { api } from '../api.js';
import { h, table } from '../ui.js';
import { RateChart, fmt } from '../chart.js';

const WINDOW = 300;

const TILES = [
  ['connections', 'Connections'], ['messages_in_per_s', 'Messages in /s'],
  ['messages_out_per_s', 'Messages out /s'], ['sessions', 'Sessions'],
  ['subscriptions', 'Subscriptions'], ['retained', 'Retained'],
];

export async function render(main) {
  const values = {};
  const tiles = h('div', { class: 'tiles' }, TILES.map(([key, label]) => {
    values[key] = h('div', { class: 'value', id: 'tile-' + key }, '–');
    return h('div', { class: 'tile' }, h('div', { class: 'label' }, label), values[key]);
  }));
  const chart = new RateChart(WINDOW, 'Messages per second, in and out, over the last five minutes');
  const live = h('p', { class: 'muted', id: 'stream-state' }, 'Connecting to the live statistics…');
  const providers = h('div', {});
  main.append(h('h1', {}, 'Dashboard'), tiles,
    h('section', { 'aria-labelledby': 'rates-title' },
      h('h2', { id: 'rates-title' }, 'Messages per second'),
      h('div', { class: 'legend' }, h('span', { class: 'in' }, 'in (received)'), h('span', { class: 'out' }, 'out (sent)')),
      chart.el, live),
    h('section', { 'aria-labelledby': 'providers-title' },
      h('h2', { id: 'providers-title' }, 'Authentication providers'), providers),
    h('p', {}, 'All metrics in Prometheus format: ', h('a', { href: '/metrics' }, '/metrics'), '.'));

  const source = new EventSource('/api/v1/stats/stream');
  source.addEventListener('sample', (event) => {
    const s = JSON.parse(event.data);
    for (const [key] of TILES) values[key].textContent = fmt(s[key]);
    chart.push(s);
    live.textContent = `Live: updated ${new Date(s.t).toLocaleTimeString()}.`;
  });
  source.addEventListener('error', () => { live.textContent = 'The live statistics stream is reconnecting…'; });

  async function loadProviders() {
    const chain = await api('GET', '/providers');
    const rows = chain.providers.map((p) => h('tr', {},
      h('td', { class: 'num' }, p.position), h('td', {}, p.name), h('td', {}, p.on_error),
      h('td', { class: 'num' }, p.allow), h('td', { class: 'num' }, p.deny),
      h('td', { class: 'num' }, p.next), h('td', { class: 'num' }, p.error)));
    providers.replaceChildren(
      rows.length ? table('The provider chain, in order', [['#', 'num'], 'Provider', 'On error', ['Allowed', 'num'],
        ['Denied', 'num'], ['Passed on', 'num'], ['Errors', 'num']], rows) : h('p', {}, 'No provider is configured.'),
      h('p', { class: 'muted' }, `Anonymous clients ${chain.allow_anonymous ? 'are' : 'are not'} admitted when no provider decides: ` +
        `${chain.anonymous_admitted} admitted, ${chain.unresolved_refused} refused.`));
  }
  await loadProviders();
  const timer = setInterval(() => loadProviders().catch(() => {}), 5000);
  return () => { source.close(); clearInterval(timer); };
}
