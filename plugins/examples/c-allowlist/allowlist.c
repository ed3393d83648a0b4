/*
 * c-allowlist: the example allow-list plugin of plugins/examples/allowlist, written in C
 * against mesgd_plugin.h. Same config, same decisions:
 *
 *   config   {"users": [{"username": "alice", "password_sha256": "<64 hex digits>",
 *                        "acl": [{"pattern": "sensors/%u/#", "permission": "readwrite"}]}],
 *             "blocked": ["mallory"]}
 *
 *   no username                           -> next
 *   a blocked username                    -> deny (not_authorized)
 *   a listed user, right password         -> allow, with the user's acl (none: unrestricted)
 *   a listed user, wrong/missing password -> deny (bad_credentials)
 *   anyone else                           -> next
 *
 * To stay buildable with nothing but a C compiler it carries a small JSON reader, base64 and
 * SHA-256 (FIPS 180-4); a real plugin would use a JSON library and a slow, salted password
 * hash. The instance is read-only after create, so concurrent authenticate calls are safe.
 *
 * Build: cc -shared -fPIC -O2 -I ../../api/include -o libc_allowlist.so allowlist.c
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mesgd_plugin.h"

#define MAX_DEPTH 64

/* ------------------------------------------------------------------------- text and buffers */

struct str {
    char *ptr; /* NUL-terminated copy; len excludes the NUL */
    size_t len;
};

static void str_free(struct str *s) {
    free(s->ptr);
    s->ptr = NULL;
    s->len = 0;
}

static int str_eq(const struct str *s, const char *text, size_t len) {
    return s->len == len && memcmp(s->ptr, text, len) == 0;
}

/* Hands a copy of text to the host through out; returns status, for `return give(...)`. */
static int32_t give(struct mesgd_buffer *out, const char *text, size_t len, int32_t status) {
    if (out == NULL) {
        return status;
    }
    uint8_t *copy = malloc(len == 0 ? 1 : len);
    if (copy == NULL) {
        out->ptr = NULL;
        out->len = 0;
        return MESGD_PLUGIN_ERROR;
    }
    memcpy(copy, text, len);
    out->ptr = copy;
    out->len = len;
    return status;
}

static int32_t fail(struct mesgd_buffer *out, const char *message) {
    return give(out, message, strlen(message), MESGD_PLUGIN_ERROR);
}

/* ------------------------------------------------------------------------------ JSON reader */

struct cursor {
    const uint8_t *p;
    const uint8_t *end;
};

static void skip_ws(struct cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) {
        c->p++;
    }
}

/* Whether the next non-space byte is ch (consumed if so). */
static int accept(struct cursor *c, char ch) {
    skip_ws(c);
    if (c->p < c->end && *c->p == (uint8_t)ch) {
        c->p++;
        return 1;
    }
    return 0;
}

static int hex_value(uint8_t b) {
    if (b >= '0' && b <= '9') return b - '0';
    if (b >= 'a' && b <= 'f') return b - 'a' + 10;
    if (b >= 'A' && b <= 'F') return b - 'A' + 10;
    return -1;
}

static int read_hex4(struct cursor *c, uint32_t *out) {
    if (c->end - c->p < 4) return -1;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hex_value(c->p[i]);
        if (h < 0) return -1;
        v = v << 4 | (uint32_t)h;
    }
    c->p += 4;
    *out = v;
    return 0;
}

static size_t put_utf8(char *out, uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Reads a JSON string into a fresh NUL-terminated copy with its escapes decoded. Decoding
 * never lengthens the text, so the raw length bounds the copy. */
static int read_string(struct cursor *c, struct str *out) {
    if (!accept(c, '"')) return -1;
    const uint8_t *start = c->p;
    const uint8_t *q = start;
    while (q < c->end && *q != '"') {
        q += (*q == '\\' && q + 1 < c->end) ? 2 : 1;
    }
    if (q >= c->end) return -1;
    char *buf = malloc((size_t)(q - start) + 1);
    if (buf == NULL) return -1;
    size_t n = 0;
    while (c->p < q) {
        uint8_t b = *c->p++;
        if (b < 0x20) goto bad;
        if (b != '\\') {
            buf[n++] = (char)b;
            continue;
        }
        uint8_t e = *c->p++;
        switch (e) {
        case '"': buf[n++] = '"'; break;
        case '\\': buf[n++] = '\\'; break;
        case '/': buf[n++] = '/'; break;
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case 'n': buf[n++] = '\n'; break;
        case 'r': buf[n++] = '\r'; break;
        case 't': buf[n++] = '\t'; break;
        case 'u': {
            uint32_t cp;
            if (read_hex4(c, &cp)) goto bad;
            if (cp >= 0xD800 && cp < 0xDC00) {
                uint32_t low;
                if (c->end - c->p < 6 || c->p[0] != '\\' || c->p[1] != 'u') goto bad;
                c->p += 2;
                if (read_hex4(c, &low) || low < 0xDC00 || low > 0xDFFF) goto bad;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                goto bad;
            }
            n += put_utf8(buf + n, cp);
            break;
        }
        default:
            goto bad;
        }
    }
    c->p = q + 1;
    buf[n] = '\0';
    out->ptr = buf;
    out->len = n;
    return 0;
bad:
    free(buf);
    return -1;
}

static int accept_literal(struct cursor *c, const char *literal) {
    size_t len = strlen(literal);
    skip_ws(c);
    if ((size_t)(c->end - c->p) >= len && memcmp(c->p, literal, len) == 0) {
        c->p += len;
        return 1;
    }
    return 0;
}

/* Member iteration: 1 = a key was read (the caller reads or skips its value), 0 = the object
 * ended, -1 = malformed. Start with *first = 1 after the opening brace. */
static int next_member(struct cursor *c, int *first, struct str *key) {
    if (accept(c, '}')) return 0;
    if (!*first && !accept(c, ',')) return -1;
    *first = 0;
    if (read_string(c, key)) return -1;
    if (!accept(c, ':')) {
        str_free(key);
        return -1;
    }
    return 1;
}

/* Item iteration, like next_member: 1 = an item follows, 0 = the array ended, -1 = malformed. */
static int next_item(struct cursor *c, int *first) {
    if (accept(c, ']')) return 0;
    if (!*first && !accept(c, ',')) return -1;
    *first = 0;
    return 1;
}

static int skip_value(struct cursor *c, int depth) {
    if (depth > MAX_DEPTH) return -1;
    skip_ws(c);
    if (c->p >= c->end) return -1;
    int first = 1, more;
    switch (*c->p) {
    case '{': {
        c->p++;
        struct str key;
        while ((more = next_member(c, &first, &key)) == 1) {
            str_free(&key);
            if (skip_value(c, depth + 1)) return -1;
        }
        return more;
    }
    case '[':
        c->p++;
        while ((more = next_item(c, &first)) == 1) {
            if (skip_value(c, depth + 1)) return -1;
        }
        return more;
    case '"': {
        struct str s;
        if (read_string(c, &s)) return -1;
        str_free(&s);
        return 0;
    }
    default:
        if (accept_literal(c, "true") || accept_literal(c, "false") || accept_literal(c, "null")) return 0;
        {
            const uint8_t *start = c->p;
            int digits = 0;
            while (c->p < c->end && *c->p != '\0' && strchr("+-0123456789.eE", *c->p) != NULL) {
                digits += *c->p >= '0' && *c->p <= '9';
                c->p++;
            }
            return (c->p > start && digits > 0) ? 0 : -1;
        }
    }
}

/* A string, or null (out->ptr stays NULL). */
static int read_optional_string(struct cursor *c, struct str *out) {
    out->ptr = NULL;
    out->len = 0;
    if (accept_literal(c, "null")) return 0;
    return read_string(c, out);
}

/* ----------------------------------------------------------------------------- base64, hex */

static int base64_value(uint8_t b) {
    if (b >= 'A' && b <= 'Z') return b - 'A';
    if (b >= 'a' && b <= 'z') return b - 'a' + 26;
    if (b >= '0' && b <= '9') return b - '0' + 52;
    if (b == '+') return 62;
    if (b == '/') return 63;
    return -1;
}

/* Decodes padded standard base64 into out (at least len / 4 * 3 bytes); -1 if malformed. */
static long base64_decode(const char *text, size_t len, uint8_t *out) {
    if (len % 4 != 0) return -1;
    size_t n = 0;
    for (size_t i = 0; i < len; i += 4) {
        int pad = (text[i + 3] == '=') + (text[i + 2] == '=');
        if (pad > 0 && i + 4 != len) return -1;
        if (text[i + 2] == '=' && text[i + 3] != '=') return -1;
        uint32_t v = 0;
        for (int k = 0; k < 4 - pad; k++) {
            int d = base64_value((uint8_t)text[i + k]);
            if (d < 0) return -1;
            v = v << 6 | (uint32_t)d;
        }
        v <<= 6 * pad;
        out[n++] = (uint8_t)(v >> 16);
        if (pad < 2) out[n++] = (uint8_t)(v >> 8);
        if (pad < 1) out[n++] = (uint8_t)v;
    }
    return (long)n;
}

static int parse_hex32(const struct str *s, uint8_t out[32]) {
    if (s->len != 64) return -1;
    for (size_t i = 0; i < 32; i++) {
        int hi = hex_value((uint8_t)s->ptr[2 * i]), lo = hex_value((uint8_t)s->ptr[2 * i + 1]);
        if (hi < 0 || lo < 0) return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

/* --------------------------------------------------------------------------------- SHA-256 */

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t rotr(uint32_t x, int n) {
    return x >> n | x << (32 - n);
}

static void sha256_block(uint32_t h[8], const uint8_t block[64]) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++) {
        w[i] = (uint32_t)block[4 * i] << 24 | (uint32_t)block[4 * i + 1] << 16 | (uint32_t)block[4 * i + 2] << 8 |
               block[4 * i + 3];
    }
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ w[i - 15] >> 3;
        uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ w[i - 2] >> 10;
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
        uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

static void sha256(const uint8_t *data, size_t len, uint8_t out[32]) {
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    size_t full = len / 64 * 64;
    for (size_t i = 0; i < full; i += 64) sha256_block(h, data + i);
    uint8_t tail[128] = {0};
    size_t rest = len - full;
    memcpy(tail, data + full, rest);
    tail[rest] = 0x80;
    size_t tail_len = rest + 9 <= 64 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++) tail[tail_len - 1 - i] = (uint8_t)(bits >> (8 * i));
    for (size_t i = 0; i < tail_len; i += 64) sha256_block(h, tail + i);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(h[i] >> 8);
        out[4 * i + 3] = (uint8_t)h[i];
    }
}

/* Compares without an early exit, so the time taken does not tell where the bytes differ. */
static int constant_time_eq(const uint8_t *a, const uint8_t *b, size_t len) {
    volatile uint8_t diff = 0;
    for (size_t i = 0; i < len; i++) diff |= a[i] ^ b[i];
    return diff == 0;
}

/* ------------------------------------------------------------------------------ the plugin */

struct user {
    struct str name;
    uint8_t password_sha256[32];
    struct str acl; /* the raw JSON array from the config; ptr NULL = unrestricted */
};

struct allowlist {
    struct user *users;
    size_t n_users;
    struct str *blocked;
    size_t n_blocked;
};

static void allowlist_free(struct allowlist *a) {
    for (size_t i = 0; i < a->n_users; i++) {
        str_free(&a->users[i].name);
        str_free(&a->users[i].acl);
    }
    for (size_t i = 0; i < a->n_blocked; i++) str_free(&a->blocked[i]);
    free(a->users);
    free(a->blocked);
    free(a);
}

/* Copies the raw text of the next value (an ACL array, or null for none). */
static int read_raw_acl(struct cursor *c, struct str *out) {
    out->ptr = NULL;
    out->len = 0;
    if (accept_literal(c, "null")) return 0;
    skip_ws(c);
    if (c->p >= c->end || *c->p != '[') return -1;
    const uint8_t *start = c->p;
    if (skip_value(c, 0)) return -1;
    size_t len = (size_t)(c->p - start);
    out->ptr = malloc(len + 1);
    if (out->ptr == NULL) return -1;
    memcpy(out->ptr, start, len);
    out->ptr[len] = '\0';
    out->len = len;
    return 0;
}

/* One element of "users"; returns NULL on success or a static error message. */
static const char *read_user(struct cursor *c, struct user *u) {
    memset(u, 0, sizeof *u);
    int first = 1, more, have_hash = 0;
    struct str key;
    if (!accept(c, '{')) return "every element of `users` must be an object";
    while ((more = next_member(c, &first, &key)) == 1) {
        const char *error = NULL;
        if (str_eq(&key, "username", 8)) {
            str_free(&u->name);
            if (read_string(c, &u->name)) error = "`username` must be a string";
        } else if (str_eq(&key, "password_sha256", 15)) {
            struct str hex;
            if (read_string(c, &hex)) {
                error = "`password_sha256` must be a string";
            } else {
                if (parse_hex32(&hex, u->password_sha256)) error = "`password_sha256` must be 64 hex digits";
                str_free(&hex);
                have_hash = 1;
            }
        } else if (str_eq(&key, "acl", 3)) {
            str_free(&u->acl);
            if (read_raw_acl(c, &u->acl)) error = "`acl` must be an array of {pattern, permission} or null";
        } else {
            error = "a user has an unknown key (expected username, password_sha256, acl)";
        }
        str_free(&key);
        if (error != NULL) return error;
    }
    if (more < 0) return "the config is not valid JSON";
    if (u->name.ptr == NULL) return "a user has no `username`";
    if (!have_hash) return "a user has no `password_sha256`";
    return NULL;
}

static const char *read_config(struct cursor *c, struct allowlist *a) {
    int first = 1, more;
    struct str key;
    if (!accept(c, '{')) return "the config must be a JSON object";
    while ((more = next_member(c, &first, &key)) == 1) {
        int is_users = str_eq(&key, "users", 5), is_blocked = str_eq(&key, "blocked", 7);
        str_free(&key);
        if (!is_users && !is_blocked) return "the config has an unknown key (expected users, blocked)";
        int item_first = 1, item;
        if (!accept(c, '[')) return "`users` and `blocked` must be arrays";
        while ((item = next_item(c, &item_first)) == 1) {
            if (is_users) {
                struct user *grown = realloc(a->users, (a->n_users + 1) * sizeof *grown);
                if (grown == NULL) return "out of memory";
                a->users = grown;
                const char *error = read_user(c, &a->users[a->n_users]);
                a->n_users++; /* counted even on error, so that allowlist_free releases it */
                if (error != NULL) return error;
            } else {
                struct str *grown = realloc(a->blocked, (a->n_blocked + 1) * sizeof *grown);
                if (grown == NULL) return "out of memory";
                a->blocked = grown;
                if (read_string(c, &a->blocked[a->n_blocked])) return "`blocked` must hold strings";
                a->n_blocked++;
            }
        }
        if (item < 0) return "the config is not valid JSON";
    }
    if (more < 0) return "the config is not valid JSON";
    for (size_t i = 0; i < a->n_users; i++) {
        for (size_t j = 0; j < i; j++) {
            if (str_eq(&a->users[j].name, a->users[i].name.ptr, a->users[i].name.len)) {
                return "a user is listed twice";
            }
        }
    }
    return NULL;
}

static const char *plugin_name(void) {
    return "c-allowlist";
}

static const char *plugin_version(void) {
    return "0.1.0";
}

static int32_t plugin_create(const uint8_t *config_json, size_t config_len, void **out_instance,
                             struct mesgd_buffer *out_error) {
    struct allowlist *a = calloc(1, sizeof *a);
    if (a == NULL) return fail(out_error, "out of memory");
    struct cursor c = {config_json, config_json + config_len};
    const char *error = read_config(&c, a);
    if (error == NULL) {
        skip_ws(&c);
        if (c.p != c.end) error = "the config has text after its end";
    }
    if (error != NULL) {
        allowlist_free(a);
        return fail(out_error, error);
    }
    *out_instance = a;
    return MESGD_PLUGIN_OK;
}

static int32_t answer(struct mesgd_buffer *out, const char *json) {
    return give(out, json, strlen(json), MESGD_PLUGIN_OK);
}

static int32_t plugin_authenticate(void *instance, const uint8_t *request_json, size_t request_len,
                                   struct mesgd_buffer *out_response) {
    const struct allowlist *a = instance;
    struct cursor c = {request_json, request_json + request_len};
    struct str username = {NULL, 0}, password = {NULL, 0}, key;
    int first = 1, more;
    int32_t status;
    if (!accept(&c, '{')) return fail(out_response, "the request is not a JSON object");
    while ((more = next_member(&c, &first, &key)) == 1) {
        int bad;
        if (str_eq(&key, "username", 8)) {
            str_free(&username);
            bad = read_optional_string(&c, &username);
        } else if (str_eq(&key, "password", 8)) {
            str_free(&password);
            bad = read_optional_string(&c, &password);
        } else {
            bad = skip_value(&c, 0); /* fields a newer host may add are ignored */
        }
        str_free(&key);
        if (bad) {
            more = -1;
            break;
        }
    }
    if (more < 0) {
        status = fail(out_response, "the request is not valid JSON");
        goto done;
    }
    if (username.ptr == NULL) {
        status = answer(out_response, "{\"result\":\"next\"}");
        goto done;
    }
    for (size_t i = 0; i < a->n_blocked; i++) {
        if (str_eq(&a->blocked[i], username.ptr, username.len)) {
            status = answer(out_response,
                            "{\"result\":\"deny\",\"code\":\"not_authorized\",\"reason\":\"the username is blocked\"}");
            goto done;
        }
    }
    const struct user *user = NULL;
    for (size_t i = 0; i < a->n_users && user == NULL; i++) {
        if (str_eq(&a->users[i].name, username.ptr, username.len)) user = &a->users[i];
    }
    if (user == NULL) {
        status = answer(out_response, "{\"result\":\"next\",\"reason\":\"not on the allow-list\"}");
        goto done;
    }
    if (password.ptr == NULL) {
        status = answer(out_response, "{\"result\":\"deny\",\"reason\":\"no password\"}");
        goto done;
    }
    uint8_t *bytes = malloc(password.len / 4 * 3 + 1);
    if (bytes == NULL) {
        status = fail(out_response, "out of memory");
        goto done;
    }
    long n = base64_decode(password.ptr, password.len, bytes);
    uint8_t digest[32];
    if (n >= 0) sha256(bytes, (size_t)n, digest);
    free(bytes);
    if (n < 0) {
        status = fail(out_response, "the request's password is not base64");
        goto done;
    }
    if (!constant_time_eq(digest, user->password_sha256, 32)) {
        status = answer(out_response, "{\"result\":\"deny\",\"reason\":\"wrong password\"}");
        goto done;
    }
    if (user->acl.ptr == NULL) {
        status = answer(out_response, "{\"result\":\"allow\"}");
        goto done;
    }
    static const char head[] = "{\"result\":\"allow\",\"acl\":";
    size_t len = sizeof head - 1 + user->acl.len + 1;
    char *json = malloc(len + 1);
    if (json == NULL) {
        status = fail(out_response, "out of memory");
        goto done;
    }
    snprintf(json, len + 1, "%s%s}", head, user->acl.ptr);
    status = give(out_response, json, len, MESGD_PLUGIN_OK);
    free(json);
done:
    str_free(&username);
    str_free(&password);
    return status;
}

static void plugin_free_buffer(uint8_t *ptr, size_t len) {
    (void)len;
    free(ptr);
}

static void plugin_destroy(void *instance) {
    if (instance != NULL) allowlist_free(instance);
}

static const struct mesgd_plugin_v1 TABLE = {
    .abi_version = MESGD_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(struct mesgd_plugin_v1),
    .name = plugin_name,
    .version = plugin_version,
    .create = plugin_create,
    .authenticate = plugin_authenticate,
    .free_buffer = plugin_free_buffer,
    .destroy = plugin_destroy,
};

const struct mesgd_plugin_v1 *mesgd_plugin_entry(uint32_t host_abi_version) {
    if (MESGD_PLUGIN_ABI_MAJOR_OF(host_abi_version) != MESGD_PLUGIN_ABI_MAJOR) return NULL;
    return &TABLE;
}
