// The REST API client: same-origin fetch with the session cookie, the session's CSRF token on
// every state change, and the API's error shape turned into ApiError.

let csrf = null;

export class ApiError extends Error {
  constructor(status, code, message, retryAfter) {
    super(message);
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter;
  }
}

export function setCsrf(token) { csrf = token; }

async function decode(response) {
  const text = await response.text();
  let body = null;
  if (text) { try { body = JSON.parse(text); } catch { body = text; } }
  if (!response.ok) {
    const err = body && body.error;
    const code = (err && err.code) || 'http_' + response.status;
    // The session ended (logged out elsewhere, idle, server restarted): the shell shows the
    // login page, whichever page made the request.
    if (code === 'unauthenticated') window.dispatchEvent(new CustomEvent('mesgd:unauthenticated'));
    const message = (err && (err.message || err)) || (typeof err === 'string' ? err : response.statusText);
    throw new ApiError(response.status, code, String(message), Number(response.headers.get('retry-after')) || null);
  }
  return body;
}

// `path` is under /api/v1 unless it starts with /api/ already.
export async function api(method, path, body, extraHeaders) {
  const headers = Object.assign({}, extraHeaders || {});
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (method !== 'GET' && csrf && !headers['X-CSRF-Token']) headers['X-CSRF-Token'] = csrf;
  const url = path.startsWith('/api/') ? path : '/api/v1' + path;
  const response = await fetch(url, {
    method, headers, credentials: 'same-origin',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return decode(response);
}

// A query string from an object, leaving out empty values.
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
  const s = q.toString();
  return s ? '?' + s : '';
}
