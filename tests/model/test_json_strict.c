/* The strict JSON check (RFC 8259) in front of cJSON: every refusal with its byte offset and
 * reason, the edge cases the grammar allows (accepted), and the same refusals reaching the
 * user through the three readers that use it: safetensors headers (file offsets count the
 * 8-byte length prefix), model.safetensors.index.json and config.json. CPU only. */
#include "vkh2o_test.h"
#include "model_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void assert_msg_has(const vkh2o_error* e, const char* s)
{
    if (!strstr(e->message, s))
        fail_msg("error message \"%s\" does not contain \"%s\"", e->message, s);
}

/* `len` 0: strlen(text) (cases with a NUL byte give their length) */
typedef struct bad_case {
    const char* text;
    size_t len;
    unsigned long long at;
    const char* reason;
} bad_case;

static const bad_case bad[] = {
    /* whitespace: only space, tab, LF, CR; cJSON skips every byte <= 0x20 */
    { "{\"a\":\x0b" "1}", 0, 5, "expected a value, found byte 0x0b" },
    { "{\"a\":1}\x0c", 0, 7, "trailing bytes after the JSON value (byte 0x0c)" },
    { "{\"a\"\0:1}", 8, 4, "expected ':' after an object key, found byte 0x00" },
    { "\x01{}", 0, 0, "expected a value, found byte 0x01" },
    { "{}\0", 3, 2, "trailing bytes after the JSON value (byte 0x00)" },
    { "\xc2\xa0{}", 0, 0, "expected a value, found byte 0xc2" },   /* U+00A0 is not JSON whitespace */
    { "\xef\xbb\xbf{}", 0, 0, "byte-order mark" },
    { "", 0, 0, "no JSON value" },
    { "  \n", 0, 3, "no JSON value" },
    /* strings */
    { "{\"a\tb\":1}", 0, 3, "control byte 0x09 inside a string" },
    { "[\"x\ny\"]", 0, 3, "control byte 0x0a inside a string" },
    { "[\"\\x41\"]", 0, 2, "invalid escape in a string: 'x' after the backslash" },
    { "[\"\\'\"]", 0, 2, "invalid escape in a string: ''' after the backslash" },
    { "[\"\\u12g4\"]", 0, 2, "\\u escape needs four hex digits" },
    { "[\"\\u12\"]", 0, 2, "\\u escape needs four hex digits" },
    { "[\"\\u0000\"]", 0, 2, "\\u0000 (NUL)" },
    { "[\"\\udc00\"]", 0, 2, "unpaired UTF-16 surrogate \\udc00 (a low surrogate" },
    { "[\"\\ud800x\"]", 0, 2, "unpaired UTF-16 surrogate \\ud800 (no low surrogate" },
    { "[\"\\ud800\\u0041\"]", 0, 2, "unpaired UTF-16 surrogate \\ud800" },
    { "[\"abc", 0, 1, "string not terminated" },
    { "[\"abc\\", 0, 5, "string not terminated" },
    { "[\"\x80\"]", 0, 2, "invalid UTF-8 byte 0x80" },               /* lone continuation */
    { "[\"\xc0\xaf\"]", 0, 2, "invalid UTF-8 byte 0xc0" },           /* overlong '/' */
    { "[\"\xe0\x80\xaf\"]", 0, 2, "invalid UTF-8 byte 0xe0" },       /* overlong, 3 bytes */
    { "[\"\xed\xa0\x80\"]", 0, 2, "invalid UTF-8 byte 0xed" },       /* surrogate U+D800 */
    { "[\"\xf4\x90\x80\x80\"]", 0, 2, "invalid UTF-8 byte 0xf4" },   /* above U+10FFFF */
    { "[\"\xe2\x82\"]", 0, 2, "invalid UTF-8 byte 0xe2" },           /* cut short */
    { "[\"\xff\"]", 0, 2, "invalid UTF-8 byte 0xff" },
    /* numbers */
    { "[01]", 0, 1, "leading zero" },
    { "[-01]", 0, 1, "leading zero" },
    { "[+1]", 0, 1, "expected a value, found '+'" },
    { "[.5]", 0, 1, "expected a value, found '.'" },
    { "[1.]", 0, 1, "digit after its decimal point" },
    { "[1.e5]", 0, 1, "digit after its decimal point" },
    { "[1e]", 0, 1, "digit in its exponent" },
    { "[1e+]", 0, 1, "digit in its exponent" },
    { "[-]", 0, 1, "digit after its sign" },
    { "[0x10]", 0, 2, "expected ',' or ']' after an array element, found 'x'" },
    { "[NaN]", 0, 1, "expected a value, found 'N'" },
    { "[Infinity]", 0, 1, "expected a value, found 'I'" },
    { "[-Infinity]", 0, 1, "digit after its sign" },
    { "[1234567890123456789012345678901234567890123456789012345678901]", 0, 1, "a number of 61 characters" },
    /* literals */
    { "[tru]", 0, 1, "expected a value, found 't'" },
    { "[True]", 0, 1, "expected a value, found 'T'" },
    { "[nul", 0, 1, "expected a value, found 'n'" },
    /* structure */
    { "{\"a\":1,}", 0, 7, "trailing comma before '}'" },
    { "[1,2,]", 0, 5, "trailing comma before ']'" },
    { "[,]", 0, 1, "expected a value, found ','" },
    { "{,}", 0, 1, "expected a string key, found ','" },
    { "{'a':1}", 0, 1, "expected a string key, found '''" },
    { "{a:1}", 0, 1, "expected a string key, found 'a'" },
    { "{\"a\" 1}", 0, 5, "expected ':' after an object key, found '1'" },
    { "{\"a\":1 \"b\":2}", 0, 7, "expected ',' or '}' after an object member, found '\"'" },
    { "[1 2]", 0, 3, "expected ',' or ']' after an array element, found '2'" },
    { "{\"a\":1", 0, 6, "expected ',' or '}' after an object member, found the end of the text" },
    { "[", 0, 1, "expected a value, found the end of the text" },
    { "{}{}", 0, 2, "trailing bytes after the JSON value ('{')" },
    { "1 2", 0, 2, "trailing bytes after the JSON value ('2')" },
    { "{} // comment", 0, 3, "trailing bytes" },
    { "/* c */ {}", 0, 0, "expected a value, found '/'" },
    /* duplicate keys, also when spelled differently; nested objects have their own keys */
    { "{\"a\":1,\"b\":2,\"a\":3}", 0, 13, "key 'a' appears twice in one object (first at byte 1)" },
    { "{\"a\":1,\"\\u0061\":2}", 0, 7, "key 'a' appears twice" },
    { "{\"x\":{\"k\":1},\"y\":{\"k\":2,\"k\":3}}", 0, 24, "key 'k' appears twice in one object (first at byte 18)" },
    { "{\"\\n\":1,\"\\n\":2}", 0, 8, "key '?' appears twice" },
    /* found by fuzz_safetensors: objects whose keys are all empty (no key bytes stored) */
    { "{\"\":1,\"\":2}", 0, 6, "key '' appears twice in one object (first at byte 1)" },
};

static void test_refusals(void** state)
{
    (void)state;
    unsigned n = 0;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (!bad[i].reason)
            continue;
        size_t len = bad[i].len ? bad[i].len : strlen(bad[i].text);
        vkh2o_error e = { 0 };
        vkh2o_result r = vkh2o_json_check(bad[i].text, len, "case.json", 0, &e);
        printf("# %s\n", e.message);
        assert_int_equal(r, VKH2O_ERROR_FORMAT);
        assert_int_equal(e.code, VKH2O_ERROR_FORMAT);
        char want[96];
        snprintf(want, sizeof want, "case.json: not valid JSON (RFC 8259) at byte %llu: ", bad[i].at);
        assert_msg_has(&e, want);
        assert_msg_has(&e, bad[i].reason);
        n++;
    }
    printf("# %u refusals checked\n", n);

    /* nesting: 128 levels pass, 129 do not (offset of the 129th bracket) */
    char deep[300];
    for (int levels = 128; levels <= 129; levels++) {
        memset(deep, '[', (size_t)levels);
        memset(deep + levels, ']', (size_t)levels);
        vkh2o_error e = { 0 };
        vkh2o_result r = vkh2o_json_check(deep, 2 * (size_t)levels, "deep.json", 0, &e);
        if (levels == 128) {
            assert_int_equal(r, VKH2O_OK);
        } else {
            assert_int_equal(r, VKH2O_ERROR_FORMAT);
            assert_msg_has(&e, "at byte 128: nested deeper than 128 levels");
        }
    }
    /* the base moves the offset (a safetensors header starts at byte 8 of its file) */
    vkh2o_error e = { 0 };
    assert_int_equal(vkh2o_json_check("{\"a\":01}", 8, "hdr", 8, &e), VKH2O_ERROR_FORMAT);
    assert_msg_has(&e, "hdr: not valid JSON (RFC 8259) at byte 13: a number has a leading zero");
}

static void test_accepted(void** state)
{
    (void)state;
    static const char* good[] = {
        "{}", "[]", "0", "-0", "\"\"", "true", "false", "null", " \t\r\n{ \"a\" : [ 1 , 2 ] }\r\n\t ",
        "[0.5, -1.25e+3, 1E-7, 10e5, 0e0, 123456789012345678901234567890]",
        "[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0041\\u00e9\\u20ac\\ud83d\\ude00\"]",
        "[\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \x7f\"]",   /* 2-, 3-, 4-byte UTF-8 and DEL */
        "{\"a\":{\"a\":{\"a\":1}}}",                                /* the same key at different depths */
        "{\"a\":1,\"A\":2,\"a \":3,\"\\u00e9\":4,\"\xc3\xa9x\":5}",  /* distinct keys */
        "[{\"k\":1},{\"k\":2}]",                                   /* one key in sibling objects */
        "{\"\":1}", "{\"\":{\"\":{}}}",                                  /* empty keys */
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        vkh2o_error e = { 0 };
        vkh2o_result r = vkh2o_json_check(good[i], strlen(good[i]), "good.json", 0, &e);
        if (r != VKH2O_OK)
            fail_msg("refused valid JSON %s: %s", good[i], e.message);
    }
    /* many keys in one object (a real index has ~100k): distinct ones pass, one repeat is found */
    enum { N = 20000 };
    char* big = malloc((size_t)N * 24 + 16);
    assert_non_null(big);
    size_t n = 0;
    big[n++] = '{';
    for (int i = 0; i < N; i++)
        n += (size_t)sprintf(big + n, "%s\"t%d\":%d", i ? "," : "", i, i);
    big[n++] = '}';
    vkh2o_error e = { 0 };
    assert_int_equal(vkh2o_json_check(big, n, "big.json", 0, &e), VKH2O_OK);
    memcpy(big + 1, "\"t9\"", 4);   /* the first key "t0" becomes a second "t9" */
    assert_int_equal(vkh2o_json_check(big, n, "big.json", 0, &e), VKH2O_ERROR_FORMAT);
    assert_msg_has(&e, "key 't9' appears twice in one object (first at byte 1)");
    free(big);
}

/* ---- the readers: the check's message reaches the caller, naming the file ---- */

static void write_bytes(const char* path, const void* p, size_t n)
{
    FILE* f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

static void write_st(const char* path, const char* hdr, size_t hlen, size_t data_bytes)
{
    uint8_t buf[1024] = { 0 };
    assert_true(8 + hlen + data_bytes <= sizeof buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    memcpy(buf + 8, hdr, hlen);
    write_bytes(path, buf, 8 + hlen + data_bytes);
}

static void expect_st(const char* hdr, size_t hlen, const char* msg)
{
    const char* p = vt_scratch_path("strict.safetensors");
    write_st(p, hdr, hlen, 16);
    vkh2o_safetensors* st = NULL;
    vkh2o_error e = { 0 };
    vkh2o_result r = vkh2o_safetensors_open(p, &st, &e);
    printf("# %s\n", e.message);
    assert_int_equal(r, VKH2O_ERROR_FORMAT);
    assert_null(st);
    assert_msg_has(&e, p);
    assert_msg_has(&e, msg);
}

#define TA "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"
#define TB "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}"

static void test_safetensors_header(void** state)
{
    (void)state;
    /* a control byte cJSON would take for whitespace: offset counted from the file start */
    const char vt[] = "{\"a\":" TA ",\x0b\"b\":" TB "}";
    expect_st(vt, sizeof vt - 1, "header: not valid JSON (RFC 8259) at byte 62: expected a string key, found byte 0x0b");
    /* NUL padding instead of spaces */
    char pad[128];
    const char ok[] = "{\"a\":" TA "}";
    memcpy(pad, ok, sizeof ok - 1);
    memset(pad + sizeof ok - 1, 0, 6);
    expect_st(pad, sizeof ok - 1 + 6, "at byte 62: trailing bytes after the JSON value (byte 0x00)");
    /* space padding is what writers do: accepted */
    memset(pad + sizeof ok - 1, ' ', 6);
    const char* p = vt_scratch_path("strict.safetensors");
    write_st(p, pad, sizeof ok - 1 + 6, 8);
    vkh2o_safetensors* st = NULL;
    vkh2o_error e = { 0 };
    assert_int_equal(vkh2o_safetensors_open(p, &st, &e), VKH2O_OK);
    vkh2o_safetensors_destroy(st);
    /* duplicate tensor names, also through an escape */
    const char dup[] = "{\"a\":" TA ",\"\\u0061\":" TB "}";
    expect_st(dup, sizeof dup - 1, "key 'a' appears twice in one object (first at byte 9)");
    /* the format puts '{' first */
    const char lead[] = " {\"a\":" TA "}";
    expect_st(lead, sizeof lead - 1, "header starts with whitespace at byte 8");
    /* __metadata__: an object of strings, once */
    expect_st("{\"__metadata__\":null}", 21, "__metadata__ is not a JSON object");
    expect_st("{\"__metadata__\":\"x\"}", 20, "__metadata__ is not a JSON object");
    expect_st("{\"__metadata__\":{\"a\":{\"b\":\"c\"}}}", 32, "__metadata__ entry 'a' is not a string");
    expect_st("{\"__metadata__\":{\"a\":null}}", 27, "__metadata__ entry 'a' is not a string");
    expect_st("{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}}", 35, "key 'a' appears twice");
    expect_st("{\"__metadata__\":{},\"__metadata__\":{}}", 37, "key '__metadata__' appears twice");
    /* invalid UTF-8 in a tensor name */
    const char utf[] = "{\"a\xff\":" TA "}";
    expect_st(utf, sizeof utf - 1, "at byte 11: invalid UTF-8 byte 0xff");
}

static void test_index_and_config(void** state)
{
    (void)state;
    const char* d = vt_scratch_path("ck");
    assert_int_equal(mkdir(d, 0755), 0);
    char ip[1300];
    snprintf(ip, sizeof ip, "%s/model.safetensors.index.json", d);
    static const struct {
        const char* json;
        const char* msg;
    } idx[] = {
        { "{\"weight_map\": {\"a\": \"x.safetensors\",}}", "at byte 37: trailing comma before '}'" },
        { "{\"weight_map\": {\"a\": \"x.safetensors\"}, \"weight_map\": {}}",
          "at byte 39: key 'weight_map' appears twice in one object (first at byte 1)" },
        { "{\"weight_map\": {\"a\": \"x.safe\x01tensors\"}}", "at byte 28: control byte 0x01 inside a string" },
    };
    for (size_t i = 0; i < sizeof idx / sizeof idx[0]; i++) {
        write_bytes(ip, idx[i].json, strlen(idx[i].json));
        vkh2o_checkpoint* ck = NULL;
        vkh2o_error e = { 0 };
        assert_int_equal(vkh2o_checkpoint_open(d, &ck, &e), VKH2O_ERROR_FORMAT);
        printf("# %s\n", e.message);
        assert_null(ck);
        assert_msg_has(&e, ip);
        assert_msg_has(&e, idx[i].msg);
    }

    const char* cp = vt_scratch_path("config.json");
    static const struct {
        const char* json;
        const char* msg;
    } cfg[] = {
        /* which hidden_size would we use? cJSON: the first, Python: the last */
        { "{\"hidden_size\": 7168, \"hidden_size\": 4096}", "at byte 22: key 'hidden_size' appears twice" },
        { "{\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 32, \"factor\": 40}}", "key 'factor' appears twice" },
        { "{\"text_config\": {\"hidden_size\": 7168,}}", "at byte 37: trailing comma before '}'" },
        { "{\"rms_norm_eps\": 1e-06, \"rope_theta\": NaN}", "at byte 38: expected a value, found 'N'" },
        { "{\"num_attention_heads\": 064}", "at byte 24: a number has a leading zero" },
    };
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
        write_bytes(cp, cfg[i].json, strlen(cfg[i].json));
        vkh2o_mla_config c;
        vkh2o_mla_config_kimi_k26(&c);
        vkh2o_mla_config before = c;
        vkh2o_error e = { 0 };
        assert_int_equal(vkh2o_mla_config_from_json(cp, &c, &e), VKH2O_ERROR_FORMAT);
        printf("# %s\n", e.message);
        assert_msg_has(&e, cp);
        assert_msg_has(&e, cfg[i].msg);
        assert_memory_equal(&c, &before, sizeof c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_accepted),
        cmocka_unit_test(test_safetensors_header),
        cmocka_unit_test(test_index_and_config),
    };
    return cmocka_run_group_tests_name("json_strict", tests, vt_scratch_setup, vt_scratch_teardown);
}
