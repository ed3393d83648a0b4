// Content routing: the pattern compiler (a sample JSON message and a mode per field → the
// listener path) and the route tester (a JSON message → the listener paths it reaches now).

import { api } from '../api.js';
import { h, field, table, message, fill } from '../ui.js';

const SAMPLE = '{"kind":"chat","room":"lobby","text":"hello"}';
const MODES = [['exact', 'exact value'], ['any', 'any value (must exist)'], ['omit', 'omit']];

export async function render(main) {
  // The compiler.
  const sample = field('Sample message (JSON)', 'sample', { textarea: true, rows: 4, value: SAMPLE });
  const modes = h('fieldset', { id: 'modes', class: 'row' }, h('legend', {}, 'Mode of each field'));
  const compiled = h('div', { id: 'compiled', 'aria-live': 'polite' });
  const compiler = h('form', { class: 'card', 'aria-labelledby': 'compiler-title' },
    h('h2', { id: 'compiler-title' }, 'Pattern compiler'),
    h('p', { class: 'muted' }, 'Exact: the field must have this value. Any: it must exist. Omit: it does not matter. ' +
      'Keys are sorted, so the path is the same whatever their order in the sample.'),
    sample, h('p', {}, h('button', { type: 'button', class: 'secondary', onclick: () => readFields() }, 'Read the fields')),
    modes, h('p', {}, h('button', { type: 'submit' }, 'Compile')), compiled);
  const sampleInput = sample.querySelector('textarea');

  function readFields() {
    modes.replaceChildren(h('legend', {}, 'Mode of each field'));
    let parsed;
    try { parsed = JSON.parse(sampleInput.value); } catch (err) {
      compiled.replaceChildren(message(`The sample is not JSON: ${err.message}`, 'error')); return;
    }
    if (parsed === null || typeof parsed !== 'object') {
      compiled.replaceChildren(message('The sample must be a JSON object or array.', 'error')); return;
    }
    const keys = Array.isArray(parsed) ? parsed.map((_, i) => String(i)) : Object.keys(parsed).sort();
    for (const key of keys) {
      const f = field(`${key}`, 'mode-' + key, { options: MODES, value: 'omit' });
      f.querySelector('select').dataset.field = key;
      modes.append(f);
    }
    compiled.replaceChildren();
  }

  compiler.addEventListener('submit', async (e) => {
    e.preventDefault();
    let parsed;
    try { parsed = JSON.parse(sampleInput.value); } catch (err) {
      compiled.replaceChildren(message(`The sample is not JSON: ${err.message}`, 'error')); return;
    }
    const m = {};
    for (const s of modes.querySelectorAll('select')) if (s.value !== 'omit') m[s.dataset.field] = s.value;
    try {
      const { pattern } = await api('POST', '/api/patterns/compile', { sample: parsed, modes: m });
      compiled.replaceChildren(h('p', {}, 'Listener path: ', h('code', { id: 'compiled-path' }, pattern)),
        h('p', { class: 'muted' }, `A WebSocket listener opened at ws://${location.host}${pattern} receives the messages it matches.`));
    } catch (err) { compiled.replaceChildren(message(err.message, 'error')); }
  });

  // The tester.
  const msg = field('Message (JSON)', 'message', { textarea: true, rows: 4, value: SAMPLE });
  const reached = h('div', { id: 'reached', 'aria-live': 'polite' });
  const tester = h('form', { class: 'card', 'aria-labelledby': 'tester-title' },
    h('h2', { id: 'tester-title' }, 'Route tester'),
    h('p', { class: 'muted' }, 'Which listener paths would this message reach right now? Nothing is sent. ' +
      'With a user, each path also lists which of their assigned patterns cover it (what a grant token issued now may reach).'),
    msg, field('User whose grant patterns to show (optional)', 'grant-user'),
    h('p', {}, h('button', { type: 'submit' }, 'Test the route')), reached);
  tester.addEventListener('submit', async (e) => {
    e.preventDefault();
    try {
      const user = tester.querySelector('input[name="grant-user"]').value.trim();
      const a = await api('POST', '/content/test', { message: msg.querySelector('textarea').value, user: user || undefined });
      const grants = (p) => (p.grant_patterns.length
        ? p.grant_patterns.map((g, i) => [i ? ', ' : '', h('code', {}, g)]) : h('span', { class: 'muted' }, 'none'));
      fill(reached,
        a.paths.length === 0 ? h('p', { id: 'reaches-none' }, `It reaches no listener (${a.listeners_registered} registered).`) :
          table(`It reaches ${a.paths.length} listener path${a.paths.length === 1 ? '' : 's'} (of ${a.listeners_registered} listeners registered)`,
            ['Listener path', ['Connections', 'num'], user ? `${user}'s grant patterns that reach it` : null].filter(Boolean),
            a.paths.map((p) => h('tr', {}, h('td', {}, h('code', { class: 'reached-path' }, p.path)), h('td', { class: 'num' }, p.listeners),
              user ? h('td', { class: 'grant-cover' }, grants(p)) : null))),
        a.truncated ? h('p', { class: 'muted' }, 'More paths matched than are listed.') : null);
    } catch (err) { reached.replaceChildren(message(err.message, 'error')); }
  });

  main.append(h('h1', {}, 'Content routing'), compiler, tester,
    h('p', { class: 'muted' }, 'Patterns assigned to users and grant tokens are on the ', h('a', { href: '/console/grants' }, 'Grants'), ' page.'));
  readFields();
}
