// Drives the mesgd console in headless Chromium for tests/console_browser.rs, which starts the
// real server and runs this script. What only the Rust side can do or check (creating the first
// administrator, real MQTT and WebSocket clients) is asked for on standard output as a line
// `ASK {json}`; the answer comes back as one JSON line on standard input. Any failed check
// throws, and the script exits non-zero. One browser, one page, reused throughout.
//
// Environment: MESGD_URL (http://127.0.0.1:PORT), CHROMIUM (the executable), SCREENSHOTS (dir).

import { createInterface } from 'node:readline';
import { mkdirSync } from 'node:fs';
import { chromium } from 'playwright-core';
import AxeBuilder from '@axe-core/playwright';

const BASE = process.env.MESGD_URL;
const SHOTS = process.env.SCREENSHOTS;
const ADMIN = 'root';
const PASSWORD = 'console-admin-pw-7Q';
const SEED = '{"kind":"chat","room":"lobby","text":"hello"}';
mkdirSync(SHOTS, { recursive: true });

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
async function ask(question) {
  process.stdout.write('ASK ' + JSON.stringify(question) + '\n');
  const { value, done } = await lines.next();
  if (done) throw new Error(`no answer to ${JSON.stringify(question)}`);
  const answer = JSON.parse(value);
  if (answer.error) throw new Error(`${question.ask}: ${answer.error}`);
  return answer;
}
const log = (text) => process.stdout.write(`console test: ${text}\n`);
function check(condition, text) { if (!condition) throw new Error('check failed: ' + text); log('ok: ' + text); }

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM, args: ['--no-sandbox'] });
const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
const page = await context.newPage();
page.setDefaultTimeout(10000);
const problems = [];
page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
page.on('console', (m) => { if (m.type() === 'error' && !/401|403|409|429/.test(m.text())) problems.push(`console error: ${m.text()}`); });

const axeSeen = new Set();
async function axe(name) {
  const result = await new AxeBuilder({ page }).analyze();
  const bad = result.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  check(bad.length === 0, `axe: no serious or critical violation on ${name}` +
    (bad.length ? ': ' + bad.map((v) => `${v.id} (${v.impact}) ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`).join('; ') : ''));
  axeSeen.add(name);
}
async function shot(name) { await page.screenshot({ path: `${SHOTS}/${name}.png`, fullPage: true }); }
async function heading(text) { await page.getByRole('heading', { level: 1, name: text }).waitFor(); }
async function nav(name, h1) { await page.getByRole('navigation').getByRole('link', { name, exact: true }).click(); await heading(h1); }
async function text(selector) { return (await page.locator(selector).first().textContent()).trim(); }

async function logIn(password) {
  await page.getByLabel('Administrator name').fill(ADMIN);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Log in' }).click();
}

try {
  // -- First run: no administrator.
  await page.goto(BASE + '/console');
  await heading('No administrator yet');
  check((await page.locator('main').textContent()).includes('mesgd admin add'), 'the first-run page says how to create an administrator');
  await shot('01-no-admin'); await axe('no-admin');
  await ask({ ask: 'create_admin', name: ADMIN, password: PASSWORD });
  await page.getByRole('button', { name: /I have created one/ }).click();
  await heading('Log in to mesgd');
  await shot('02-login'); await axe('login');

  // -- A wrong password, then the right one.
  await logIn('not-the-password');
  await page.getByText('Wrong name or password.').waitFor();
  check(true, 'a wrong password is refused with a clear message');
  await logIn(PASSWORD);
  await heading('Dashboard');
  check(await page.getByRole('navigation').isVisible(), 'logged in: the navigation is shown');

  // -- Dashboard: the chart rises while load runs.
  await page.waitForFunction(() => document.getElementById('stream-state').textContent.startsWith('Live'));
  const before = Number(await page.locator('svg.chart').getAttribute('data-max'));
  await ask({ ask: 'load_start' });
  await page.waitForFunction(() => Number(document.querySelector('svg.chart').dataset.max) > 20 &&
    Number(document.getElementById('tile-messages_in_per_s').textContent.replace(/[^0-9.]/g, '')) > 0, null, { timeout: 15000 });
  const after = Number(await page.locator('svg.chart').getAttribute('data-max'));
  check(after > before, `the chart rises while the load runs (${before} -> ${after} msg/s)`);
  // Eight more samples under load, so the screenshot shows a plateau rather than a spike.
  const points = Number(await page.locator('svg.chart').getAttribute('data-points'));
  await page.waitForFunction((n) => Number(document.querySelector('svg.chart').dataset.points) >= n, points + 8, { timeout: 15000 });
  await shot('03-dashboard');
  await ask({ ask: 'load_stop' });
  check(Number(await text('#tile-connections')) >= 1, 'the dashboard counts connections');
  check((await page.locator('main table').textContent()).includes('builtin'), 'the provider outcomes list the builtin provider');
  await axe('dashboard');

  // -- Users and rules, the ACL tester, and a real MQTT client.
  await nav('Users', 'Users');
  await page.getByLabel('Name', { exact: true }).fill('alice');
  await page.getByLabel('Password').fill('alice-pw-3x');
  await page.getByRole('button', { name: 'Add user' }).click();
  await heading('User alice');
  for (const [pattern, permission] of [['sensors/%u/#', 'read'], ['#', 'deny']]) {
    await page.getByLabel(/Topic pattern/).fill(pattern);
    await page.getByLabel('Permission').selectOption(permission);
    await page.getByRole('button', { name: 'Insert rule' }).click();
    await page.getByText('Rule inserted').first().waitFor();
  }
  await page.locator('tbody tr').nth(1).waitFor();
  await page.getByRole('button', { name: 'Move rule 2 up' }).click();
  await page.waitForFunction(() => document.querySelector('tbody tr td code').textContent === '#');
  check(true, 'moving rule 2 up puts it first');
  await page.getByRole('button', { name: 'Move rule 1 down' }).click();
  await page.waitForFunction(() => document.querySelector('tbody tr td code').textContent === 'sensors/%u/#');
  await page.getByRole('button', { name: 'Disable' }).click();
  await page.waitForFunction(() => document.getElementById('user-state').textContent.startsWith('disabled'));
  await page.getByRole('button', { name: 'Enable' }).click();
  await page.waitForFunction(() => document.getElementById('user-state').textContent === 'enabled');
  check(true, 'a user is disabled and enabled again');
  await page.getByRole('button', { name: 'Make it a certificate (x509) user' }).click();
  await page.waitForFunction(() => document.getElementById('user-kind').textContent === 'certificate (x509)');
  await page.getByLabel('Password for it').fill('alice-pw-3x');
  await page.getByRole('button', { name: 'Make it a password user' }).click();
  await page.waitForFunction(() => document.getElementById('user-kind').textContent === 'password');
  check(true, 'a user is made a certificate user and a password user again');
  await page.getByLabel('New password').fill('alice-pw-4y');
  await page.getByRole('button', { name: 'Set password' }).click();
  await page.getByText('Password set').first().waitFor();
  await shot('05-user'); await axe('user');
  await nav('Users', 'Users');
  await page.getByRole('link', { name: 'alice', exact: true }).waitFor();
  await shot('04-users'); await axe('users');

  await nav('ACL tester', 'ACL tester');
  const verdicts = [];
  for (const [access, topic] of [['read', 'sensors/alice/temp'], ['write', 'sensors/alice/temp'], ['read', 'sensors/bob/temp']]) {
    await page.getByLabel('User', { exact: true }).fill('alice');
    await page.getByLabel('Access').selectOption(access);
    await page.getByLabel('Topic').fill(topic);
    await page.locator('#acl-answer').evaluate((el) => el.replaceChildren());
    await page.getByRole('button', { name: 'Test', exact: true }).click();
    const verdict = await text('#acl-verdict');
    const allowed = verdict.startsWith('Allowed');
    const real = await ask({ ask: 'mqtt_check', username: 'alice', password: 'alice-pw-4y', access, topic });
    check(real.allowed === allowed, `the tester says "${verdict}" for ${access} ${topic}, and a real MQTT client is ${real.allowed ? 'allowed' : 'refused'}`);
    verdicts.push(verdict);
    if (access === 'read' && topic === 'sensors/bob/temp') await shot('06-acl');
  }
  check(/^Allowed: rule 1 /.test(verdicts[0]) && /^Denied: rule 2 /.test(verdicts[2]), 'the tester names the deciding rule');
  await axe('acl');

  // -- A page of another origin (localhost, not 127.0.0.1) posting to the API is refused.
  const evil = await context.newPage();
  await evil.goto(BASE.replace('127.0.0.1', 'localhost') + '/console');
  await evil.evaluate(async (target) => {
    await fetch(target + '/api/v1/users', { method: 'POST', mode: 'no-cors', credentials: 'include',
      headers: { 'Content-Type': 'text/plain' }, body: JSON.stringify({ username: 'mallory', password: 'x' }) }).catch(() => {});
  }, BASE);
  await evil.close();
  check(!(await ask({ ask: 'user_exists', name: 'mallory' })).exists, 'a cross-origin POST to the API creates nothing');
  check((await ask({ ask: 'user_exists', name: 'alice' })).exists, 'while the console\'s own POST did');

  // -- Clients: 10,000 of them, searched and paged by the server.
  await ask({ ask: 'bulk_clients', count: 10000 });
  await nav('Clients', 'Clients');
  const search = async (prefix) => {
    await page.getByLabel('Client id starts with').fill(prefix);
    await page.getByRole('button', { name: 'Search' }).click();
  };
  const link = (id) => page.getByRole('link', { name: id, exact: true });
  await search('bulk-');
  await link('bulk-00000').waitFor();
  for (const first of ['bulk-00050', 'bulk-00100', 'bulk-00150']) {
    await page.getByRole('button', { name: 'Next page' }).click();
    await link(first).waitFor();
  }
  check((await page.locator('.pager').textContent()).includes('Page 4, 50 shown'), 'Next page walks the 10,000 clients fifty at a time');
  await page.getByRole('button', { name: 'Previous page' }).click();
  await link('bulk-00100').waitFor();
  await search('bulk-099');
  await link('bulk-09900').waitFor();
  await page.getByRole('button', { name: 'Next page' }).click();
  await link('bulk-09999').waitFor();
  check(await page.getByRole('button', { name: 'Next page' }).isDisabled(), 'the last of the 10,000 is on the last page, which says so');
  await search('bulk-09999');
  await page.waitForFunction(() => document.querySelectorAll('#client-list tbody tr').length === 1);
  check(true, 'a search among 10,000 clients finds exactly one');

  // -- Clients: find one, look at it, kick it.
  await ask({ ask: 'connect_client', id: 'console-kick-me' });
  await search('console-kick');
  await page.getByRole('link', { name: 'console-kick-me' }).waitFor();
  check(await page.locator('#client-list tbody tr').count() === 1, 'the server-side search finds exactly the client');
  await shot('07-clients'); await axe('clients');
  await page.getByRole('link', { name: 'console-kick-me' }).click();
  await heading('Client console-kick-me');
  check((await page.locator('dl.facts').textContent()).includes('no client certificate'), 'the detail shows the TLS identity');
  check((await page.locator('main table').textContent()).includes('kick/me/#'), 'the detail lists its subscriptions');
  await shot('08-client'); await axe('client');
  await ask({ ask: 'kick_start' });
  await page.getByRole('button', { name: /Kick/ }).click();
  await ask({ ask: 'await_disconnect', id: 'console-kick-me' });
  await page.getByText('console-kick-me was disconnected.').waitFor();
  check(true, 'the kicked client is disconnected within 1 s');

  // -- Retained: listed, viewed, deleted, then a new subscriber gets nothing.
  await ask({ ask: 'publish_retained', topic: 'console/retained/1', payload: 'hello retained' });
  await nav('Retained', 'Retained messages');
  await page.getByRole('button', { name: 'View console/retained/1' }).click();
  await page.locator('#retained-view pre').filter({ hasText: 'hello retained' }).waitFor();
  check(true, 'the retained message is listed and shown whole');
  await shot('09-retained'); await axe('retained');
  await page.getByRole('button', { name: 'Delete console/retained/1' }).click();
  await page.locator('#retained-none').waitFor();
  await ask({ ask: 'no_retained_for_new_subscriber', topic: 'console/retained/1' });
  check(true, 'after the delete a new subscriber gets no retained message');

  // -- Content routing: compile the seed's pattern, a listener there, the route tester, delivery.
  await nav('Routing', 'Content routing');
  await page.getByLabel('kind', { exact: true }).selectOption('exact');
  await page.getByLabel('room', { exact: true }).selectOption('exact');
  await page.getByRole('button', { name: 'Compile' }).click();
  const path = await text('#compiled-path');
  check(path === '/kind=chat/room=lobby', `the compiler makes the seed's path (${path})`);
  await ask({ ask: 'ws_listen', path });
  await page.getByRole('button', { name: 'Test the route' }).click();
  await page.locator('.reached-path').filter({ hasText: path }).waitFor();
  check(!(await text('#reached')).includes('null'), 'the route tester says the message reaches the listener, and nothing else');
  await shot('10-routing'); await axe('routing');
  await ask({ ask: 'ws_deliver', path, message: SEED });
  check(true, 'the WebSocket listener on that path receives the message');

  // -- Grants: assign alice the seed's pattern (a path) and another compiled from a sample, issue
  // a grant token, a real client with it reaches the listener; remove the assignment, and its
  // next message is not delivered.
  await nav('Grants', 'Grants');
  await page.getByLabel('User', { exact: true }).fill('alice');
  await page.getByRole('button', { name: 'Show grants' }).click();
  await page.locator('#grants-none').waitFor();
  await page.getByLabel('Pattern (a listener path)').fill(path);
  await page.getByRole('button', { name: 'Assign', exact: true }).click();
  const lobby = page.locator(`.grant-row[data-pattern="${path}"]`);
  await lobby.waitFor();
  check((await lobby.locator('.grant-how').textContent()) === 'direct', 'the assigned pattern is listed as direct');
  await page.getByLabel('Sample message (JSON)').fill('{"kind":"chat","room":"kitchen","text":"x"}');
  await page.getByRole('button', { name: 'Read the fields' }).click();
  await page.getByLabel('text', { exact: true }).selectOption('omit');
  await page.getByRole('button', { name: 'Compile and assign' }).click();
  await page.locator('.grant-row[data-pattern="/kind=chat/room=kitchen"]').waitFor();
  check(true, 'a pattern compiled from a sample is assigned');
  await page.getByRole('button', { name: 'Issue a grant token' }).click();
  const token = await page.locator('#grant-token').inputValue();
  check(token.split('.').length === 2, 'a grant token is shown');
  check(/^Expires /.test(await text('#grant-expiry')), 'with its expiry');
  await shot('15-grants'); await axe('grants');
  await ask({ ask: 'grant_deliver', token, path, message: '{"kind":"chat","room":"lobby","n":1}' });
  check(true, 'a client with the grant token reaches the listener on a covered path');
  // The route tester names the grant pattern that reaches the listener, and not the other.
  await nav('Routing', 'Content routing');
  await page.getByLabel('User whose grant patterns to show (optional)').fill('alice');
  await page.getByRole('button', { name: 'Test the route' }).click();
  const cover = page.locator('.grant-cover').first();
  await cover.waitFor();
  check((await cover.textContent()) === path, `the route tester says alice's ${path} reaches it (${await cover.textContent()})`);
  await page.goto(BASE + '/console/grants?user=alice');
  await lobby.waitFor();
  await lobby.getByRole('button', { name: `Remove ${path}` }).click();
  await lobby.waitFor({ state: 'detached' });
  await ask({ ask: 'grant_stopped', message: '{"kind":"chat","room":"lobby","n":2}', marker: '{"kind":"chat","room":"lobby","marker":true}' });
  check(true, 'after the console removes the assignment, the grant\'s next message is not delivered');

  // -- Sessions: a persistent session is listed and deleted.
  await ask({ ask: 'offline_session', id: 'console-persistent' });
  await nav('Sessions', 'Sessions');
  await page.getByRole('button', { name: 'Delete session console-persistent' }).waitFor();
  await shot('11-sessions'); await axe('sessions');
  await page.getByRole('button', { name: 'Delete session console-persistent' }).click();
  await page.getByText('Session console-persistent deleted.').waitFor();
  await ask({ ask: 'session_gone', id: 'console-persistent' });
  check(true, 'the deleted session is gone from the broker');

  // -- Keyboard only: skip link, navigation, a form, its answer.
  await page.goto(BASE + '/console');
  await heading('Dashboard');
  await page.keyboard.press('Tab');
  check(await page.evaluate(() => document.activeElement.textContent) === 'Skip to content', 'the first Tab reaches the skip link');
  const outline = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
  check(outline !== 'none', `the focused control has a visible outline (${outline})`);
  let reached = false;
  for (let i = 0; i < 12 && !reached; i++) {
    await page.keyboard.press('Tab');
    reached = await page.evaluate(() => document.activeElement.textContent === 'ACL tester');
  }
  check(reached, 'Tab reaches the ACL tester link');
  await page.keyboard.press('Enter');
  await heading('ACL tester');
  await page.keyboard.press('Tab');
  check(await page.evaluate(() => document.activeElement.name) === 'username', 'after navigating, Tab lands in the page\'s first field');
  await page.keyboard.type('alice');
  await page.keyboard.press('Tab');
  await page.keyboard.press('Tab');
  await page.keyboard.press('Tab');
  await page.keyboard.type('sensors/alice/x');
  await page.keyboard.press('Enter');
  check((await text('#acl-verdict')).startsWith('Allowed'), 'a form is filled and submitted by keyboard alone');
  await shot('12-keyboard');

  // -- Phone width: nothing wider than the screen.
  await page.setViewportSize({ width: 375, height: 740 });
  for (const [where, h1] of [['/console', 'Dashboard'], ['/console/users/alice', 'User alice'], ['/console/routing', 'Content routing'], ['/console/clients', 'Clients'], ['/console/grants?user=alice', 'Grants']]) {
    await page.goto(BASE + where);
    await heading(h1);
    const wide = await page.evaluate(() => document.documentElement.scrollWidth);
    check(wide <= 375, `${where} fits a 375 px screen (${wide} px)`);
    await shot('13-phone-' + h1.toLowerCase().replace(/ /g, '-'));
  }
  await axe('phone');
  await page.setViewportSize({ width: 1280, height: 860 });

  // -- A session that ends behind the page's back (here: its cookie is gone) leads to the login.
  await context.clearCookies();
  await nav('Users', 'Log in to mesgd');
  await page.locator('#login-result').getByText('Your session ended: log in again.').waitFor();
  check(true, 'a page whose session ended shows the login page and says why');
  await logIn(PASSWORD);
  await heading('Users');
  check(true, 'logging in again lands on the page that was asked for');

  // -- Log out, then a lockout.
  await page.getByRole('button', { name: 'Log out' }).click();
  await heading('Log in to mesgd');
  await page.goto(BASE + '/console/users');
  await heading('Log in to mesgd');
  check(true, 'after logging out the console asks for a login again');
  // Three failures within the window lock logins (the first run's wrong password counts too).
  let wrong = 0, locked = false;
  for (let i = 0; i < 4 && !locked; i++) {
    await page.locator('#login-result').evaluate((el) => el.replaceChildren());
    await logIn('wrong-' + i);
    const answer = page.locator('#login-result .message');
    await answer.waitFor();
    const said = await answer.textContent();
    if (said === 'Wrong name or password.') wrong++;
    else if (said.startsWith('Too many failed logins')) locked = true;
    else throw new Error(`unexpected login answer: ${said}`);
  }
  check(wrong >= 1 && locked, `after ${wrong} wrong passwords logins are locked`);
  await page.locator('#login-result').evaluate((el) => el.replaceChildren());
  await logIn(PASSWORD);
  await page.getByText(/Too many failed logins/).waitFor();
  check(true, 'after repeated failures logins are locked, the right password too');
  await shot('14-locked');

  check(problems.length === 0, 'no script error in the page' + (problems.length ? ': ' + problems.join('; ') : ''));
  log(`done: ${axeSeen.size} pages checked by axe`);
  await browser.close();
  process.exit(0);
} catch (err) {
  await shot('failure').catch(() => {});
  process.stderr.write(`console test failed: ${err.stack || err}\n`);
  await browser.close().catch(() => {});
  process.exit(1);
}
