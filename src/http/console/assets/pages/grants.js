// Grants: the content-routing patterns assigned to a user (directly, or through a role), add
// one (a path, or compiled from a sample message), remove a direct one, and issue a grant
// token (shown once, with its expiry). Changes are live at the user's grant connections' next
// message; a token issued now carries the patterns held now.

import { api } from '../api.js';
import { h, field, table, values, message, status, when, fill } from '../ui.js';
import { navigate } from '../app.js';

const MODES = [['omit', 'omit'], ['exact', 'exact value'], ['any', 'any value (must exist)']];

export async function render(main, _params, me) {
  const admin = me.scope === 'admin';
  const user = (new URLSearchParams(location.search).get('user') || '').trim();
  const pick = h('form', { class: 'card', 'aria-labelledby': 'grants-title' },
    h('h1', { id: 'grants-title' }, 'Grants'),
    h('p', { class: 'muted' }, 'A grant token lets a WebSocket client open content-routing listeners on the paths its user\'s ' +
      'patterns cover, and publish messages they cover. Removing a pattern is live at the next message.'),
    h('div', { class: 'row' }, field('User', 'user', { required: true, value: user }),
      h('div', {}, h('button', { type: 'submit' }, 'Show grants'))));
  pick.addEventListener('submit', (e) => {
    e.preventDefault();
    navigate(`/console/grants?user=${encodeURIComponent(values(pick).user.trim())}`);
  });
  main.append(pick);
  if (!user) return;

  const base = `/users/${encodeURIComponent(user)}`;
  const result = h('div', { id: 'grants-result', 'aria-live': 'polite' });
  const held = h('div', { id: 'grants-held' });
  const ok = (text) => { result.replaceChildren(message(text, 'ok')); status(text); };
  const fail = (err) => result.replaceChildren(message(err.message, 'error'));

  async function draw() {
    const [view, roles] = await Promise.all([api('GET', base + '/patterns'), api('GET', '/roles')]);
    const through = (p) => roles.filter((r) => view.roles.includes(r.name) && r.patterns.includes(p)).map((r) => r.name);
    const rows = view.patterns.map((p) => {
      const direct = view.direct.includes(p);
      const via = through(p);
      const how = [direct ? 'direct' : null, via.length ? `role ${via.join(', ')}` : null].filter(Boolean).join('; ');
      return h('tr', { class: 'grant-row', 'data-pattern': p },
        h('td', {}, h('code', {}, p)), h('td', { class: 'grant-how' }, how),
        h('td', {}, direct ? h('button', { type: 'button', class: 'danger', disabled: !admin, 'aria-label': `Remove ${p}`,
          onclick: async () => {
            try { await api('DELETE', `${base}/patterns?path=${encodeURIComponent(p)}`); await draw(); ok(`Removed ${p}`); } catch (err) { fail(err); }
          } }, 'Remove') : h('span', { class: 'muted' }, 'remove it from the role')));
    });
    fill(held, view.patterns.length
      ? table(`${user}'s patterns (${view.patterns.length})`, ['Pattern', 'Assigned', ''], rows)
      : h('p', { id: 'grants-none' }, `${user} holds no pattern, so no grant token can be issued yet.`),
    view.roles.length ? h('p', { class: 'muted' }, `Roles: ${view.roles.join(', ')}.`) : null);
  }

  const add = h('form', { class: 'card', 'aria-labelledby': 'add-title' }, h('h2', { id: 'add-title' }, 'Assign a pattern'),
    h('div', { class: 'row' }, field('Pattern (a listener path)', 'path', { required: true, placeholder: '/kind=chat/room=lobby' }),
      h('div', {}, h('button', { type: 'submit', disabled: !admin }, 'Assign'))));
  add.addEventListener('submit', async (e) => {
    e.preventDefault();
    const path = values(add).path.trim();
    try { await api('POST', base + '/patterns', { path }); await draw(); add.reset(); ok(`Assigned ${path}`); } catch (err) { fail(err); }
  });

  const sample = field('Sample message (JSON)', 'sample', { textarea: true, rows: 3, value: '{"kind":"chat","room":"lobby"}' });
  const sampleInput = sample.querySelector('textarea');
  const modes = h('fieldset', { class: 'row' }, h('legend', {}, 'Mode of each field'));
  const parse = () => { try { const v = JSON.parse(sampleInput.value); return v && typeof v === 'object' ? v : null; } catch { return null; } };
  function readFields() {
    modes.replaceChildren(h('legend', {}, 'Mode of each field'));
    const v = parse();
    if (!v) { result.replaceChildren(message('The sample must be a JSON object or array.', 'error')); return; }
    for (const key of Array.isArray(v) ? v.map((_, i) => String(i)) : Object.keys(v).sort()) {
      const f = field(key, 'mode-' + key, { options: MODES, value: 'exact' });
      f.querySelector('select').dataset.field = key;
      modes.append(f);
    }
  }
  const compile = h('form', { class: 'card', 'aria-labelledby': 'compile-title' }, h('h2', { id: 'compile-title' }, 'Assign a pattern compiled from a sample'),
    sample, h('p', {}, h('button', { type: 'button', class: 'secondary', onclick: readFields }, 'Read the fields')),
    modes, h('p', {}, h('button', { type: 'submit', disabled: !admin }, 'Compile and assign')));
  compile.addEventListener('submit', async (e) => {
    e.preventDefault();
    const v = parse();
    if (!v) { result.replaceChildren(message('The sample must be a JSON object or array.', 'error')); return; }
    const m = {};
    for (const s of modes.querySelectorAll('select')) if (s.value !== 'omit') m[s.dataset.field] = s.value;
    try {
      const before = new Set((await api('GET', base + '/patterns')).direct);
      const after = await api('POST', base + '/patterns', { sample: v, modes: m });
      await draw();
      const added = after.direct.filter((p) => !before.has(p));
      ok(added.length ? `Assigned ${added.join(', ')}` : 'Already assigned');
    } catch (err) { fail(err); }
  });

  const tokenOut = h('div', { id: 'grant-token-out', 'aria-live': 'polite' });
  const issue = h('section', { class: 'card', 'aria-labelledby': 'issue-title' }, h('h2', { id: 'issue-title' }, 'Issue a grant token'),
    h('p', { class: 'muted' }, 'The token carries the patterns held now and is shown only once: copy it. ' +
      'Removing a pattern later is still enforced on connections made with it.'),
    h('p', {}, h('button', { type: 'button', id: 'grant-issue', disabled: !admin, onclick: async () => {
      try {
        const t = await api('POST', base + '/grant-token');
        const f = field('Grant token (shown once)', 'grant-token', { textarea: true, rows: 3, value: t.token });
        const area = f.querySelector('textarea');
        area.readOnly = true;
        area.id = 'grant-token';
        f.querySelector('label').setAttribute('for', 'grant-token');
        const copy = h('button', { type: 'button', class: 'secondary', onclick: async () => {
          area.select();
          try { await navigator.clipboard.writeText(t.token); status('Copied'); } catch { status('Selected: press Ctrl+C to copy'); }
        } }, 'Copy');
        fill(tokenOut, f, h('p', {}, copy, ' ', h('span', { id: 'grant-expiry' }, `Expires ${when(t.expires_at)}.`)));
        status('Grant token issued');
      } catch (err) { tokenOut.replaceChildren(message(err.message, 'error')); }
    } }, 'Issue a grant token')), tokenOut);

  main.append(result, held, add, compile, issue);
  readFields();
  await draw();
}
