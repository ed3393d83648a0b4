// One builtin user: enable or disable, password, kind (password or certificate), unrestricted;
// its ACL rules in order (first match wins) with insert, move up or down, and delete.

import { api } from '../api.js';
import { h, field, table, values, message, status } from '../ui.js';
import { navigate } from '../app.js';

const PERMISSIONS = [['read', 'read'], ['write', 'write'], ['readwrite', 'read and write'], ['deny', 'deny']];

export async function render(main, [name], me) {
  const base = `/users/${encodeURIComponent(name)}`;
  const admin = me.scope === 'admin';
  const result = h('div', { id: 'user-result' });
  const ok = (text) => { result.replaceChildren(message(text, 'ok')); status(text); };
  const fail = (err) => result.replaceChildren(message(err.message, 'error'));

  async function draw() {
    const [u, rules] = await Promise.all([api('GET', base), api('GET', base + '/rules?limit=1000')]);
    const facts = h('dl', { class: 'facts' },
      h('dt', {}, 'Kind'), h('dd', { id: 'user-kind' }, u.auth_type === 'x509' ? 'certificate (x509)' : 'password'),
      h('dt', {}, 'State'), h('dd', { id: 'user-state' }, u.disabled ? 'disabled: cannot connect' : 'enabled'),
      h('dt', {}, 'Access'), h('dd', {}, u.unrestricted ? 'unrestricted: every topic' : 'decided by the rules below'));
    const toggle = h('button', { type: 'button', class: u.disabled ? '' : 'secondary', disabled: !admin,
      onclick: () => patch({ disabled: !u.disabled }, u.disabled ? 'Enabled' : 'Disabled (its connections are closed)') },
      u.disabled ? 'Enable' : 'Disable');
    const unrestricted = h('button', { type: 'button', class: 'secondary', disabled: !admin,
      onclick: () => patch({ unrestricted: !u.unrestricted }, 'Access changed') },
      u.unrestricted ? 'Restrict to the rules' : 'Make unrestricted');
    const remove = h('button', { type: 'button', class: 'danger', disabled: !admin, onclick: async () => {
      try { await api('DELETE', base); status(`Removed ${name}`); await navigate('/console/users'); } catch (err) { fail(err); }
    } }, 'Remove user');

    const pw = h('form', { class: 'card', 'aria-labelledby': 'pw-title' }, h('h2', { id: 'pw-title' }, 'Set the password'),
      h('div', { class: 'row' }, field('New password', 'password', { type: 'password', required: true, autocomplete: 'new-password' }),
        h('div', {}, h('button', { type: 'submit', disabled: !admin || u.auth_type === 'x509' }, 'Set password'))),
      u.auth_type === 'x509' ? h('p', { class: 'muted' }, 'A certificate user has no password.') : null);
    pw.addEventListener('submit', (e) => { e.preventDefault(); patch({ password: values(pw).password }, 'Password set'); });

    const other = u.auth_type === 'x509' ? 'basic' : 'x509';
    const kind = h('form', { class: 'card', 'aria-labelledby': 'kind-title' }, h('h2', { id: 'kind-title' }, 'Change the kind'),
      h('p', { class: 'muted' }, other === 'x509'
        ? 'A certificate user connects with a TLS client certificate whose Common Name is its name, and has no password.'
        : 'A password user connects with its name and a password.'),
      h('div', { class: 'row' },
        other === 'basic' ? field('Password for it', 'password', { type: 'password', required: true, autocomplete: 'new-password' }) : null,
        h('div', {}, h('button', { type: 'submit', class: 'secondary', disabled: !admin },
          other === 'x509' ? 'Make it a certificate (x509) user' : 'Make it a password user'))));
    kind.addEventListener('submit', (e) => {
      e.preventDefault();
      const body = { auth_type: other };
      if (other === 'basic') body.password = values(kind).password;
      patch(body, other === 'x509' ? 'Now a certificate (x509) user' : 'Now a password user');
    });

    const rows = rules.items.map((r, i) => h('tr', {},
      h('td', { class: 'num' }, r.position), h('td', {}, h('code', {}, r.pattern)), h('td', {}, r.permission),
      h('td', {}, h('div', { class: 'actions' },
        h('button', { type: 'button', class: 'secondary', disabled: !admin || i === 0, 'aria-label': `Move rule ${r.position} up`,
          onclick: () => rule('POST', `/rules/${r.position}/move`, { to: r.position - 1 }, `Rule moved to ${r.position - 1}`) }, 'Up'),
        h('button', { type: 'button', class: 'secondary', disabled: !admin || i === rules.items.length - 1, 'aria-label': `Move rule ${r.position} down`,
          onclick: () => rule('POST', `/rules/${r.position}/move`, { to: r.position + 1 }, `Rule moved to ${r.position + 1}`) }, 'Down'),
        h('button', { type: 'button', class: 'danger', disabled: !admin, 'aria-label': `Delete rule ${r.position}`,
          onclick: () => rule('DELETE', `/rules/${r.position}`, undefined, `Rule ${r.position} deleted`) }, 'Delete')))));
    const insert = h('form', { class: 'card', 'aria-labelledby': 'rule-title' }, h('h2', { id: 'rule-title' }, 'Insert a rule'),
      h('div', { class: 'row' },
        field('Topic pattern (%u user, %c client id)', 'pattern', { required: true, placeholder: 'devices/%u/#' }),
        field('Permission', 'permission', { options: PERMISSIONS }),
        field('At position (empty: last)', 'position', { type: 'number', min: 1 }),
        h('div', {}, h('button', { type: 'submit', disabled: !admin }, 'Insert rule'))));
    insert.addEventListener('submit', (e) => {
      e.preventDefault();
      const v = values(insert);
      const body = { pattern: v.pattern.trim(), permission: v.permission };
      if (v.position) body.position = Number(v.position);
      rule('POST', '/rules', body, 'Rule inserted');
    });
    main.replaceChildren(
      h('p', {}, h('a', { href: '/console/users' }, '← All users')),
      h('h1', {}, `User ${u.username}`), facts, h('div', { class: 'actions' }, toggle, unrestricted, remove), result, pw, kind,
      h('h2', {}, 'ACL rules'),
      h('p', { class: 'muted' }, 'Checked in order; the first rule whose pattern matches decides. No match: deny. ',
        h('a', { href: `/console/acl?user=${encodeURIComponent(name)}` }, 'Test this user\'s access'), ' · ',
        h('a', { href: `/console/grants?user=${encodeURIComponent(name)}` }, 'Content-routing grants')),
      rows.length ? table(`${rows.length} rules, in order`, [['#', 'num'], 'Pattern', 'Permission', 'Actions'], rows)
        : h('p', { id: 'no-rules' }, u.unrestricted ? 'No rule (the user is unrestricted).' : 'No rule: this user may neither publish nor subscribe.'),
      insert);
  }
  async function patch(body, text) { try { await api('PATCH', base, body); await draw(); ok(text); } catch (err) { fail(err); } }
  async function rule(method, path, body, text) { try { await api(method, base + path, body); await draw(); ok(text); } catch (err) { fail(err); } }
  await draw();
}
