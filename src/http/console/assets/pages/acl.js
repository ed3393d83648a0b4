// The ACL tester: may this user read or write this topic, and which rule decides?

import { api } from '../api.js';
import { h, field, table, values, message, fill } from '../ui.js';
import { userHref } from './users.js';

export async function render(main) {
  const user = new URLSearchParams(location.search).get('user') || '';
  const answer = h('div', { id: 'acl-answer', 'aria-live': 'polite' });
  const form = h('form', { class: 'card', 'aria-labelledby': 'acl-title' },
    h('h1', { id: 'acl-title' }, 'ACL tester'),
    h('p', { class: 'muted' }, 'Asks the rules of a builtin user the same question the broker asks when a client publishes or subscribes.'),
    h('div', { class: 'row' },
      field('User', 'username', { required: true, value: user }),
      field('Client id (for %c)', 'client_id'),
      field('Access', 'access', { options: [['read', 'read (subscribe, receive)'], ['write', 'write (publish)']] }),
      field('Topic', 'topic', { required: true, placeholder: 'devices/alice/temp' }),
      h('div', {}, h('button', { type: 'submit' }, 'Test'))),
    answer);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const v = values(form);
    try {
      const [a, rules] = await Promise.all([
        api('POST', '/acl/test', { username: v.username.trim(), client_id: v.client_id, access: v.access, topic: v.topic }),
        api('GET', `/users/${encodeURIComponent(v.username.trim())}/rules?limit=1000`),
      ]);
      const decides = a.rule ? a.rule.position : null;
      fill(answer,
        h('p', { class: 'verdict ' + (a.allowed ? 'allowed' : 'denied'), id: 'acl-verdict' },
          (a.allowed ? 'Allowed: ' : 'Denied: ') + a.reason),
        rules.items.length ? table('The user\'s rules; the deciding one is marked', [['#', 'num'], 'Pattern', 'Permission', ''],
          rules.items.map((r) => h('tr', { class: r.position === decides ? 'decides' : null },
            h('td', { class: 'num' }, r.position), h('td', {}, h('code', {}, r.pattern)), h('td', {}, r.permission),
            h('td', {}, r.position === decides ? 'decides' : '')))) : null,
        h('p', {}, h('a', { href: userHref(v.username.trim()) }, `Edit ${v.username.trim()}'s rules`)));
    } catch (err) { answer.replaceChildren(message(err.message, 'error')); }
  });
  main.append(form);
}
