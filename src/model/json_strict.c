/* A strict JSON checker (RFC 8259) run over every JSON text the library reads (safetensors
 * headers, model.safetensors.index.json, config.json) before cJSON parses it.
 *
 * Why: cJSON is lenient. It skips every byte at or below 0x20 as whitespace (NUL and other
 * control bytes included), keeps both copies of a repeated key and answers lookups with the
 * first one (Python's json, which wrote most of these files, keeps the last), and truncates a
 * string at an escaped NUL. A file the two parsers read differently is a file we might act on
 * misread, so such files are refused here with the byte offset and the reason.
 *
 * Accepted: exactly the RFC's grammar: whitespace is space, tab, LF, CR; strings hold no byte
 * below 0x20, only the RFC's escapes and well-formed UTF-8 (no overlong forms, no surrogate
 * code points); numbers are -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?; one value, nothing
 * after it but whitespace. Refused beyond the grammar (RFC 8259 sections 4 and 8.2 leave these
 * to the implementation): a key repeated in one object, \u0000, unpaired UTF-16 surrogate
 * escapes, a byte-order mark, nesting deeper than JSON_MAX_DEPTH, numbers longer than
 * JSON_MAX_NUMBER characters. */
#include "model_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 128   /* real files nest 3-4 levels; cJSON's own limit is 1000 */
#define JSON_MAX_NUMBER 60   /* cJSON 1.7.15 reads at most 63 characters of a number */

typedef struct key_rec {
    size_t off, len;          /* decoded key bytes in the arena */
    size_t at;                /* byte offset of the key's opening quote */
    const char* p;            /* arena + off, filled just before sorting */
} key_rec;

typedef struct jc {
    const uint8_t* s;
    size_t n, i;
    uint64_t base;            /* added to every offset reported */
    bool failed, oom;
    size_t fail_at;
    char reason[400];
    char* arena;              /* decoded keys of the objects being parsed, innermost last */
    size_t alen, acap;
    key_rec* keys;
    size_t nkeys, kcap;
} jc;

static bool fail(jc* j, size_t at, const char* fmt, ...) VKH2O_PRINTF(3, 4);
static bool fail(jc* j, size_t at, const char* fmt, ...)
{
    if (!j->failed) {
        j->failed = true;
        j->fail_at = at;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(j->reason, sizeof j->reason, fmt, ap);
        va_end(ap);
    }
    return false;
}

static bool oom(jc* j)
{
    j->oom = true;
    return fail(j, j->i, "out of host memory");
}

static void skip_ws(jc* j)
{
    while (j->i < j->n) {
        uint8_t c = j->s[j->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        j->i++;
    }
}

/* What stands at j->i, for messages. */
static const char* describe(const jc* j, char* buf, size_t size)
{
    if (j->i >= j->n)
        return "the end of the text";
    uint8_t c = j->s[j->i];
    if (c >= 0x21 && c < 0x7f)
        snprintf(buf, size, "'%c'", c);
    else
        snprintf(buf, size, "byte 0x%02x", c);
    return buf;
}

static bool unexpected(jc* j, const char* wanted)
{
    char b[32];
    return fail(j, j->i, "expected %s, found %s", wanted, describe(j, b, sizeof b));
}

static bool arena_put(jc* j, const uint8_t* p, size_t len)
{
    if (j->alen + len > j->acap) {
        size_t cap = j->acap ? j->acap : 256;
        while (cap < j->alen + len)
            cap *= 2;
        char* na = realloc(j->arena, cap);
        if (!na)
            return oom(j);
        j->arena = na;
        j->acap = cap;
    }
    memcpy(j->arena + j->alen, p, len);
    j->alen += len;
    return true;
}

static int hexval(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* \uXXXX at j->i (pointing at the backslash); returns the code unit or -1 after fail(). */
static long read_u_escape(jc* j)
{
    size_t at = j->i;
    if (j->i + 6 > j->n || j->s[j->i] != '\\' || j->s[j->i + 1] != 'u')
        return -1;
    long v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(j->s[j->i + 2 + k]);
        if (h < 0) {
            fail(j, at, "\\u escape needs four hex digits");
            return -1;
        }
        v = v * 16 + h;
    }
    j->i += 6;
    return v;
}

/* Length of the well-formed UTF-8 sequence at p (n bytes available), 0 when ill-formed
 * (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF). */
static size_t utf8_len(const uint8_t* p, size_t n)
{
    uint8_t c = p[0];
    size_t len;
    uint8_t lo = 0x80, hi = 0xbf;   /* allowed range of the second byte */
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
    } else
        return 0;
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t k = 2; k < len; k++)
        if ((p[k] & 0xc0) != 0x80)
            return 0;
    return len;
}

static bool put_utf8(jc* j, unsigned long cp)
{
    uint8_t b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (uint8_t)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (uint8_t)(0xc0 | (cp >> 6));
        b[1] = (uint8_t)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (uint8_t)(0xe0 | (cp >> 12));
        b[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        b[2] = (uint8_t)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        b[0] = (uint8_t)(0xf0 | (cp >> 18));
        b[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
        b[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        b[3] = (uint8_t)(0x80 | (cp & 0x3f));
        n = 4;
    }
    return arena_put(j, b, n);
}

/* A string at j->i (the opening quote). keep: append its decoded bytes to the arena. */
static bool parse_string(jc* j, bool keep)
{
    size_t start = j->i++;
    for (;;) {
        if (j->i >= j->n)
            return fail(j, start, "string not terminated");
        uint8_t c = j->s[j->i];
        if (c == '"') {
            j->i++;
            return true;
        }
        if (c < 0x20)
            return fail(j, j->i, "control byte 0x%02x inside a string (it must be escaped)", c);
        if (c == '\\') {
            size_t at = j->i;
            if (j->i + 1 >= j->n)
                return fail(j, at, "string not terminated");
            uint8_t e = j->s[j->i + 1];
            static const char simple_in[] = "\"\\/bfnrt";
            static const char simple_out[] = "\"\\/\b\f\n\r\t";
            const char* k = e ? strchr(simple_in, e) : NULL;
            if (k) {
                j->i += 2;
                if (keep && !arena_put(j, (const uint8_t*)&simple_out[k - simple_in], 1))
                    return false;
                continue;
            }
            if (e != 'u') {
                char b[32];
                j->i++;
                return fail(j, at, "invalid escape in a string: %s after the backslash", describe(j, b, sizeof b));
            }
            long u = read_u_escape(j);
            if (u < 0)
                return false;
            unsigned long cp = (unsigned long)u;
            if (cp == 0)
                return fail(j, at, "\\u0000 (NUL) in a string is not accepted (C strings and cJSON cut it short)");
            if (cp >= 0xdc00 && cp <= 0xdfff)
                return fail(j, at, "unpaired UTF-16 surrogate \\u%04lx (a low surrogate without a high one)", cp);
            if (cp >= 0xd800 && cp <= 0xdbff) {
                long lo = read_u_escape(j);
                if (j->failed)
                    return false;
                if (lo < 0xdc00 || lo > 0xdfff)
                    return fail(j, at, "unpaired UTF-16 surrogate \\u%04lx (no low surrogate follows)", cp);
                cp = 0x10000 + ((cp - 0xd800) << 10) + ((unsigned long)lo - 0xdc00);
            }
            if (keep && !put_utf8(j, cp))
                return false;
            continue;
        }
        size_t len = 1;
        if (c >= 0x80 && (len = utf8_len(j->s + j->i, j->n - j->i)) == 0)
            return fail(j, j->i, "invalid UTF-8 byte 0x%02x in a string", c);
        if (keep && !arena_put(j, j->s + j->i, len))
            return false;
        j->i += len;
    }
}

static bool is_digit(uint8_t c)
{
    return c >= '0' && c <= '9';
}

static bool parse_number(jc* j)
{
    size_t start = j->i;
    if (j->s[j->i] == '-')
        j->i++;
    if (j->i >= j->n || !is_digit(j->s[j->i]))
        return fail(j, start, "a number needs a digit after its sign");
    if (j->s[j->i] == '0') {
        j->i++;
        if (j->i < j->n && is_digit(j->s[j->i]))
            return fail(j, start, "a number has a leading zero");
    } else {
        while (j->i < j->n && is_digit(j->s[j->i]))
            j->i++;
    }
    if (j->i < j->n && j->s[j->i] == '.') {
        j->i++;
        if (j->i >= j->n || !is_digit(j->s[j->i]))
            return fail(j, start, "a number needs a digit after its decimal point");
        while (j->i < j->n && is_digit(j->s[j->i]))
            j->i++;
    }
    if (j->i < j->n && (j->s[j->i] == 'e' || j->s[j->i] == 'E')) {
        j->i++;
        if (j->i < j->n && (j->s[j->i] == '+' || j->s[j->i] == '-'))
            j->i++;
        if (j->i >= j->n || !is_digit(j->s[j->i]))
            return fail(j, start, "a number needs a digit in its exponent");
        while (j->i < j->n && is_digit(j->s[j->i]))
            j->i++;
    }
    if (j->i - start > JSON_MAX_NUMBER)
        return fail(j, start, "a number of %zu characters (at most %d accepted)", j->i - start, JSON_MAX_NUMBER);
    return true;
}

static bool parse_literal(jc* j, const char* word)
{
    size_t len = strlen(word);
    if (j->n - j->i < len || memcmp(j->s + j->i, word, len) != 0)
        return unexpected(j, "a value");
    j->i += len;
    return true;
}

static int cmp_key(const void* a, const void* b)
{
    const key_rec* x = a;
    const key_rec* y = b;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    int c = memcmp(x->p, y->p, x->len);
    if (c)
        return c;
    return x->at < y->at ? -1 : (x->at > y->at);
}

/* The keys of the object just closed are keys[first, nkeys): refuse a repeated one. */
static bool check_duplicates(jc* j, size_t first)
{
    size_t n = j->nkeys - first;
    key_rec* k = j->keys + first;
    for (size_t i = 0; i < n; i++)
        k[i].p = j->arena ? j->arena + k[i].off : "";   /* only empty keys so far: no arena */
    qsort(k, n, sizeof *k, cmp_key);
    for (size_t i = 1; i < n; i++) {
        if (k[i].len == k[i - 1].len && !memcmp(k[i].p, k[i - 1].p, k[i].len)) {
            char name[160];
            size_t m = k[i].len < sizeof name - 1 ? k[i].len : sizeof name - 1;
            for (size_t c = 0; c < m; c++)
                name[c] = (uint8_t)k[i].p[c] < 0x20 ? '?' : k[i].p[c];
            name[m] = '\0';
            return fail(j, k[i].at, "key '%s' appears twice in one object (first at byte %llu)", name,
                        (unsigned long long)(j->base + k[i - 1].at));
        }
    }
    return true;
}

static bool parse_value(jc* j, unsigned depth);

static bool parse_object(jc* j, unsigned depth)
{
    size_t first = j->nkeys, arena_mark = j->alen;
    j->i++;   /* '{' */
    skip_ws(j);
    if (j->i < j->n && j->s[j->i] == '}') {
        j->i++;
        return true;
    }
    for (;;) {
        if (j->i >= j->n || j->s[j->i] != '"') {
            if (j->i < j->n && j->s[j->i] == '}' && j->nkeys > first)
                return fail(j, j->i, "trailing comma before '}'");
            return unexpected(j, "a string key");
        }
        if (j->nkeys == j->kcap) {
            size_t cap = j->kcap ? 2 * j->kcap : 64;
            key_rec* nk = realloc(j->keys, cap * sizeof *nk);
            if (!nk)
                return oom(j);
            j->keys = nk;
            j->kcap = cap;
        }
        key_rec* kr = &j->keys[j->nkeys];
        kr->at = j->i;
        kr->off = j->alen;
        if (!parse_string(j, true))
            return false;
        kr->len = j->alen - kr->off;
        j->nkeys++;
        skip_ws(j);
        if (j->i >= j->n || j->s[j->i] != ':')
            return unexpected(j, "':' after an object key");
        j->i++;
        skip_ws(j);
        if (!parse_value(j, depth + 1))
            return false;
        skip_ws(j);
        if (j->i < j->n && j->s[j->i] == ',') {
            j->i++;
            skip_ws(j);
            continue;
        }
        if (j->i < j->n && j->s[j->i] == '}') {
            j->i++;
            break;
        }
        return unexpected(j, "',' or '}' after an object member");
    }
    bool ok = check_duplicates(j, first);
    j->nkeys = first;
    j->alen = arena_mark;
    return ok;
}

static bool parse_array(jc* j, unsigned depth)
{
    j->i++;   /* '[' */
    skip_ws(j);
    if (j->i < j->n && j->s[j->i] == ']') {
        j->i++;
        return true;
    }
    for (;;) {
        if (j->i < j->n && j->s[j->i] == ']')
            return fail(j, j->i, "trailing comma before ']'");
        if (!parse_value(j, depth + 1))
            return false;
        skip_ws(j);
        if (j->i < j->n && j->s[j->i] == ',') {
            j->i++;
            skip_ws(j);
            continue;
        }
        if (j->i < j->n && j->s[j->i] == ']') {
            j->i++;
            return true;
        }
        return unexpected(j, "',' or ']' after an array element");
    }
}

static bool parse_value(jc* j, unsigned depth)
{
    if (depth > JSON_MAX_DEPTH)
        return fail(j, j->i, "nested deeper than %d levels", JSON_MAX_DEPTH);
    if (j->i >= j->n)
        return unexpected(j, "a value");
    switch (j->s[j->i]) {
    case '{': return parse_object(j, depth);
    case '[': return parse_array(j, depth);
    case '"': return parse_string(j, false);
    case 't': return parse_literal(j, "true");
    case 'f': return parse_literal(j, "false");
    case 'n': return parse_literal(j, "null");
    default:
        if (j->s[j->i] == '-' || is_digit(j->s[j->i]))
            return parse_number(j);
        return unexpected(j, "a value");
    }
}

vkh2o_result vkh2o_json_check(const char* text, size_t len, const char* what, uint64_t base, vkh2o_error* err)
{
    jc j = { .s = (const uint8_t*)text, .n = len, .base = base };
    if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3))
        fail(&j, 0, "a byte-order mark (U+FEFF) before the value");
    else {
        skip_ws(&j);
        if (j.i >= j.n)
            fail(&j, j.i, "no JSON value (the text is empty or only whitespace)");
        else if (parse_value(&j, 1)) {
            skip_ws(&j);
            if (j.i < j.n) {
                char b[32];
                fail(&j, j.i, "trailing bytes after the JSON value (%s)", describe(&j, b, sizeof b));
            }
        }
    }
    free(j.arena);
    free(j.keys);
    if (!j.failed)
        return VKH2O_OK;
    if (j.oom)
        return vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "%s: out of host memory checking its JSON", what);
    return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: not valid JSON (RFC 8259) at byte %llu: %s", what,
                           (unsigned long long)(base + j.fail_at), j.reason);
}
