// Small DOM helpers shared by every page: an element builder, labelled fields, tables,
// messages, the status line, and a cursor pager.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

let nextId = 0;

// A labelled input (or select/textarea when `opts.options`/`opts.textarea`).
export function field(label, name, opts = {}) {
  const id = 'f-' + name + '-' + (++nextId);
  let control;
  if (opts.options) {
    control = h('select', { id, name }, opts.options.map(([value, text]) =>
      h('option', { value, selected: value === opts.value }, text)));
  } else if (opts.textarea) {
    control = h('textarea', { id, name, rows: opts.rows || 5, required: opts.required, spellcheck: 'false' });
    control.value = opts.value || '';
  } else if (opts.type === 'checkbox') {
    control = h('input', { id, name, type: 'checkbox', checked: !!opts.checked });
    return h('div', { class: 'field check' }, control, h('label', { for: id }, label));
  } else {
    control = h('input', {
      id, name, type: opts.type || 'text', required: opts.required, placeholder: opts.placeholder,
      autocomplete: opts.autocomplete || 'off', min: opts.min, value: opts.value,
      'aria-describedby': opts.describedby,
    });
  }
  return h('div', { class: 'field' }, h('label', { for: id }, label), control);
}

export function table(caption, headers, rows) {
  return h('div', { class: 'table-wrap' }, h('table', {},
    h('caption', {}, caption),
    h('thead', {}, h('tr', {}, headers.map((t) => {
      const [text, cls] = Array.isArray(t) ? t : [t];
      return h('th', { scope: 'col', class: cls }, text);
    }))),
    h('tbody', {}, rows)));
}

export function message(text, kind) {
  return h('p', { class: 'message ' + (kind || ''), role: kind === 'error' ? 'alert' : null }, text);
}

let statusTimer = null;
export function status(text) {
  const el = document.getElementById('status');
  el.textContent = text;
  clearTimeout(statusTimer);
  statusTimer = setTimeout(() => { el.textContent = ''; }, 6000);
}

export function when(seconds) {
  if (!seconds) return '';
  return new Date(seconds * 1000).toLocaleString();
}

// Reads a form's named controls into an object (checkboxes as booleans).
export function values(form) {
  const out = {};
  for (const el of form.elements) {
    if (!el.name) continue;
    out[el.name] = el.type === 'checkbox' ? el.checked : el.value;
  }
  return out;
}

// Pages through a cursor-paginated list: `load(cursor)` returns {items, next_cursor}.
export class Pager {
  constructor(load, render) {
    this.load = load; this.render = render; this.stack = []; this.cursor = null;
    this.el = h('div', { class: 'pager' });
  }
  async show(cursor) {
    this.cursor = cursor;
    const page = await this.load(cursor);
    this.render(page.items);
    const prev = h('button', { type: 'button', class: 'secondary', disabled: this.stack.length === 0,
      onclick: () => this.show(this.stack.pop()) }, 'Previous page');
    const next = h('button', { type: 'button', class: 'secondary', disabled: !page.next_cursor,
      onclick: () => { this.stack.push(this.cursor); this.show(page.next_cursor); } }, 'Next page');
    this.el.replaceChildren(prev, next, h('span', { class: 'muted' },
      `Page ${this.stack.length + 1}, ${page.items.length} shown`));
  }
  reset() { this.stack = []; return this.show(null); }
}

// Replaces an element's children, skipping the empty ones (`null` would otherwise be text).
export function fill(el, ...children) {
  el.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
}
