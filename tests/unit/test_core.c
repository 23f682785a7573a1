/* Core: status codes, number parsing, string buffer, hashing, tunables. */
#include "check.h"
#include "dsi_core.h"

static void test_status(void)
{
    static const ds_status_t codes[] = {
        DS_OK,           DS_ERR_INVALID_ARG, DS_ERR_BAD_FILE,  DS_ERR_NOT_FOUND,   DS_ERR_NO_MEMORY,
        DS_ERR_IO,       DS_ERR_MPI,         DS_ERR_HDF5,      DS_ERR_CUDA,        DS_ERR_CUBLAS,
        DS_ERR_NCCL,     DS_ERR_UNSUPPORTED, DS_ERR_NO_DEVICE, DS_ERR_INTERRUPTED, DS_ERR_DEADLOCK,
        DS_ERR_OVERFLOW, DS_ERR_INTERNAL};
    for (size_t i = 0; i < DSI_ARRAY_SIZE(codes); i++) {
        CHECK(strcmp(ds_status_string(codes[i]), "unknown status") != 0);
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(ds_status_string(codes[i]), ds_status_string(codes[j])) != 0);
    }
    CHECK(ds_status_is_input_error(DS_ERR_INVALID_ARG));
    CHECK(ds_status_is_input_error(DS_ERR_BAD_FILE));
    CHECK(!ds_status_is_input_error(DS_ERR_MPI));
    CHECK(ds_set_error(DS_ERR_IO, "line one\nline two") == DS_ERR_IO);
    CHECK(strcmp(ds_last_error(), "line one line two") == 0); /* always one line */
    ds_clear_error();
    CHECK(strcmp(ds_last_error(), "no error recorded") == 0);
}

static void test_parse(void)
{
    int64_t v = 0;
    CHECK_OK(ds_parse_count("1536", "gbs", 1, 1LL << 40, &v));
    CHECK_INT(v, 1536);
    CHECK_OK(ds_parse_count("1.5B", "tokens", 1, 1LL << 60, &v));
    CHECK_INT(v, 1500000000);
    CHECK_OK(ds_parse_count("1T", "tokens", 1, 1LL << 60, &v));
    CHECK_INT(v, 1000000000000LL);
    CHECK_OK(ds_parse_count("40M", "bucket", 1, 1LL << 60, &v));
    CHECK_INT(v, 40000000);
    CHECK_FAILS(ds_parse_count("1.5", "gbs", 1, 100, &v), DS_ERR_INVALID_ARG,
                "gbs '1.5' is not a whole number");
    CHECK_FAILS(ds_parse_count("0", "gbs", 1, 100, &v), DS_ERR_INVALID_ARG,
                "gbs 0 is out of range (accepted: 1 to 100)");
    CHECK_FAILS(ds_parse_count("", "gbs", 1, 100, &v), DS_ERR_INVALID_ARG, "is not a whole number");
    CHECK_FAILS(ds_parse_count("12x", "gbs", 1, 100, &v), DS_ERR_INVALID_ARG, "gbs '12x'");
    CHECK_FAILS(ds_parse_count("99999999999999999999", "gbs", 1, 100, &v), DS_ERR_INVALID_ARG,
                "out of range");
    CHECK_INT(v, 40000000); /* untouched on failure */
    /* Sizes (sequence lengths, hidden sizes, batches) take powers of 1024. */
    CHECK_OK(ds_parse_size("8k", "seq-len", 1, 1 << 24, &v));
    CHECK_INT(v, 8192);
    CHECK_OK(ds_parse_size("8K", "seq-len", 1, 1 << 24, &v));
    CHECK_INT(v, 8192);
    CHECK_OK(ds_parse_size("1M", "seq-len", 1, 1 << 24, &v));
    CHECK_INT(v, 1048576);
    CHECK_OK(ds_parse_size("1.5K", "global-batch", 1, 1LL << 32, &v));
    CHECK_INT(v, 1536);
    CHECK_OK(ds_parse_size("2G", "global-batch", 1, 1LL << 32, &v));
    CHECK_INT(v, 2147483648LL);
    CHECK_OK(ds_parse_size("8000", "seq-len", 1, 1 << 24, &v));
    CHECK_INT(v, 8000);
    CHECK_FAILS(ds_parse_size("32M", "seq-len", 1, 1 << 24, &v), DS_ERR_INVALID_ARG,
                "seq-len 32M is out of range (accepted: 1 to 16777216)");
    CHECK_FAILS(ds_parse_size("1B", "seq-len", 1, 1 << 24, &v), DS_ERR_INVALID_ARG,
                "seq-len '1B' is not a whole number (K/M/G allowed, powers of 1024: 8K = 8192)");
    CHECK_FAILS(ds_parse_size("1.1K", "seq-len", 1, 1 << 24, &v), DS_ERR_INVALID_ARG,
                "seq-len '1.1K' is not a whole number");
    CHECK_FAILS(ds_parse_size("8KiB", "seq-len", 1, 1 << 24, &v), DS_ERR_INVALID_ARG,
                "seq-len '8KiB'");
    CHECK_FAILS(ds_parse_size("9223372036854775807K", "seq-len", 1, INT64_MAX, &v),
                DS_ERR_INVALID_ARG, "out of range");
    CHECK_INT(v, 8000);
    int size = 0;
    CHECK_OK(dsi_parse_size_int("2k", "mbs", 1, 1 << 24, &size));
    CHECK_INT(size, 2048);
    /* Counts (tokens, samples, parameters) keep powers of 1000. */
    CHECK_OK(ds_parse_count("8k", "tokens", 1, 1LL << 60, &v));
    CHECK_INT(v, 8000);
    CHECK_OK(ds_parse_count("1M", "samples", 1, 1LL << 60, &v));
    CHECK_INT(v, 1000000);
    CHECK_OK(ds_parse_count("2T", "tokens", 1, 1LL << 60, &v));
    CHECK_INT(v, 2000000000000LL);
    CHECK_OK(dsi_parse_bytes("4MiB", "size", &v));
    CHECK_INT(v, 4 << 20);
    CHECK_OK(dsi_parse_bytes("1G", "size", &v));
    CHECK_INT(v, 1000000000);
    CHECK_FAILS(dsi_parse_bytes("4 MiB", "size", &v), DS_ERR_INVALID_ARG, "size '4 MiB'");
    double d = 0;
    CHECK_OK(ds_parse_double("2.5", "factor", 0, 10, &d));
    CHECK(d == 2.5);
    CHECK_FAILS(ds_parse_double("nan", "factor", 0, 10, &d), DS_ERR_INVALID_ARG, "is not a number");
}

/* The public parsers the command-line tool takes its numbers with: whole
 * strings only, ranges inclusive, the output untouched on failure. */
static void test_parse_public(void)
{
    int64_t v = 7;
    CHECK_OK(ds_parse_int("42", "repeats", 1, 1000, &v));
    CHECK_INT(v, 42);
    CHECK_OK(ds_parse_int("-3", "offset", -10, 10, &v));
    CHECK_INT(v, -3);
    CHECK_OK(ds_parse_int("9223372036854775807", "n", 0, INT64_MAX, &v));
    CHECK_INT(v, INT64_MAX);
    /* Refusals: one line naming the value, the output untouched. */
    static const struct {
        const char *text;
        int64_t min, max;
        const char *message;
    } bad_ints[] = {
        {"", 1, 1000, "repeats '' is not a whole number"},
        {" 4", 1, 1000, "is not a whole number"},
        {"4 ", 1, 1000, "is not a whole number"},
        {"12x", 1, 1000, "repeats '12x' is not a whole number"},
        {"4K", 1, 1000000, "is not a whole number"},
        {"2.5", 1, 1000, "is not a whole number"},
        {"-1", 0, 1000, "repeats -1 is out of range (accepted: 0 to 1000)"},
        {"1001", 0, 1000, "out of range"},
        {"9223372036854775808", 0, INT64_MAX, "out of range"},
        {"-9223372036854775809", INT64_MIN, 0, "out of range"},
        {NULL, 1, 1000, "is not a whole number"},
    };
    v = 7;
    for (size_t i = 0; i < sizeof(bad_ints) / sizeof(bad_ints[0]); i++)
        CHECK_FAILS(ds_parse_int(bad_ints[i].text, "repeats", bad_ints[i].min, bad_ints[i].max, &v),
                    DS_ERR_INVALID_ARG, bad_ints[i].message);
    CHECK_INT(v, 7);

    double d = 0.5;
    CHECK_OK(ds_parse_double("0.05", "max-foreign", 0, 1, &d));
    CHECK(d == 0.05);
    CHECK_OK(ds_parse_double("1e3", "wait-quiet", 0, 86400, &d));
    CHECK(d == 1000.0);
    CHECK_OK(ds_parse_double("0", "max-foreign", 0, 1, &d)); /* bounds are inclusive */
    CHECK(d == 0.0);
    static const struct {
        const char *text;
        double max;
        const char *message;
    } bad_doubles[] = {
        {"", 1, "max-foreign '' is not a number"},
        {" 1", 1, "is not a number"},
        {"0.5%", 1, "max-foreign '0.5%' is not a number"},
        {"-0.1", 1, "max-foreign -0.1 is out of range"},
        {"inf", 1e6, "is not a number"},
        {"1e999", 1e6, "is not a number"},
        {"2e6", 1e6, "out of range"},
    };
    d = 0.5;
    for (size_t i = 0; i < sizeof(bad_doubles) / sizeof(bad_doubles[0]); i++)
        CHECK_FAILS(ds_parse_double(bad_doubles[i].text, "max-foreign", 0, bad_doubles[i].max, &d),
                    DS_ERR_INVALID_ARG, bad_doubles[i].message);
    CHECK(d == 0.5);
    ds_dtype_t dtype;
    CHECK_OK(ds_dtype_parse("bfloat16", &dtype));
    CHECK(dtype == DS_DTYPE_BF16 && ds_dtype_size(dtype) == 2);
    CHECK_FAILS(ds_dtype_parse("fp64", &dtype), DS_ERR_INVALID_ARG,
                "dtype 'fp64' is not known (accepted: fp32, bf16");
}

/* The list parsers the options share: --microbatches, --gpus, --trace-ranks. */
static void test_parse_lists(void)
{
    int64_t values[4] = {0};
    size_t count = 99;
    CHECK_OK(ds_parse_int_list("2,4,8", "--microbatches", 1, 100000, 0, values, 4, &count));
    CHECK(count == 3 && values[0] == 2 && values[1] == 4 && values[2] == 8);
    CHECK_OK(ds_parse_int_list("1K,2k", "--gpus", 1, 1 << 24, 1, values, 4, &count));
    CHECK(count == 2 && values[0] == 1000 && values[1] == 2000); /* counts: powers of 1000 */
    static const struct {
        const char *text;
        int suffix;
        const char *message;
    } bad_lists[] = {
        {"", 0, "--microbatches '' names nothing"},
        {",", 0, "has an empty item"},
        {"2,,8", 0, "--microbatches '2,,8' has an empty item"},
        {"2,4,", 0, "ends with a comma"},
        {"2,x", 0, "--microbatches 'x' is not a whole number"},
        {"1K", 0, "is not a whole number"}, /* no suffix where counts are plain */
        {"0", 0, "--microbatches 0 is out of range (accepted: 1 to 100000)"},
        {"1,2,3,4,5", 0, "has more than 4 items"},
        {"123456789012345678901234567890123", 0, "has an item of 33 characters"},
    };
    values[0] = 77;
    count = 99;
    for (size_t i = 0; i < DSI_ARRAY_SIZE(bad_lists); i++)
        CHECK_FAILS(ds_parse_int_list(bad_lists[i].text, "--microbatches", 1, 100000,
                                      bad_lists[i].suffix, values, 4, &count),
                    DS_ERR_INVALID_ARG, bad_lists[i].message);
    CHECK(count == 99);

    int64_t *ranks = NULL;
    CHECK_OK(ds_parse_rank_list("0-3,8,6-7", 16, &ranks, &count));
    CHECK(count == 7 && ranks[0] == 0 && ranks[3] == 3 && ranks[4] == 8 && ranks[6] == 7);
    ds_rank_list_free(ranks);
    CHECK_OK(ds_parse_rank_list("15", 16, &ranks, &count));
    CHECK(count == 1 && ranks[0] == 15);
    ds_rank_list_free(ranks);
    static const char *const bad_ranks[] = {"16", "3-2", "-1", "1-",        "a", "1,,2",
                                            "1,", " 1",  "+1", "0-15,0-15", ""};
    ranks = NULL;
    for (size_t i = 0; i < DSI_ARRAY_SIZE(bad_ranks); i++)
        CHECK_FAILS(ds_parse_rank_list(bad_ranks[i], 16, &ranks, &count), DS_ERR_INVALID_ARG,
                    "rank list '");
    CHECK(ranks == NULL);
    CHECK_FAILS(ds_parse_rank_list("0-15,0-15", 16, &ranks, &count), DS_ERR_INVALID_ARG,
                "names more than the 16 ranks there are");
    CHECK_FAILS(ds_parse_rank_list("16", 16, &ranks, &count), DS_ERR_INVALID_ARG,
                "rank list '16' (accepted: ranks or ranges below 16, e.g. 0-7,64)");
}

static void test_strbuf_and_hash(void)
{
    dsi_strbuf_t buf;
    dsi_strbuf_init(&buf);
    CHECK(strcmp(dsi_strbuf_text(&buf), "") == 0);
    for (int i = 0; i < 1000; i++)
        dsi_strbuf_appendf(&buf, "%d,", i);
    CHECK(dsi_strbuf_status(&buf) == DS_OK);
    CHECK(strncmp(dsi_strbuf_text(&buf), "0,1,2,", 6) == 0);
    CHECK(buf.length == strlen(dsi_strbuf_text(&buf)));
    dsi_strbuf_free(&buf);
    /* Fixed storage: truncated to what fits, NUL-terminated, never allocated. */
    char storage[8] = "garbage";
    dsi_strbuf_init_fixed(&buf, storage, sizeof(storage));
    CHECK(strcmp(storage, "") == 0);
    dsi_strbuf_appendf(&buf, "%d-", 12);
    dsi_strbuf_append(&buf, "abcdef");
    dsi_strbuf_appendf(&buf, "%s", "more");
    CHECK(strcmp(storage, "12-abcd") == 0);
    CHECK(buf.length == 7 && dsi_strbuf_status(&buf) == DS_OK);
    dsi_strbuf_free(&buf);
    CHECK(strcmp(storage, "12-abcd") == 0);
    ds_strategy_t s;
    ds_strategy_init(&s);
    CHECK_OK(ds_strategy_parse("dp=16,tp=8,pp=8,mbs=1", &s));
    char text[12];
    ds_strategy_format(&s, text, sizeof(text));
    CHECK(strcmp(text, "dp=16,tp=8,") == 0);
    uint64_t a = dsi_hash64("abc", 3, 0), b = dsi_hash64("abd", 3, 0);
    CHECK(a != b);
    CHECK(a == dsi_hash64("abc", 3, 0));
    CHECK(dsi_hash64("abc", 3, 1) != a);
    /* The word hash is the byte hash of the words: zero, small, large, negative. */
    int64_t words[] = {0, 1, 255, 256, 0x12345678, -1, INT64_MIN, INT64_MAX, 1LL << 56, 3, 0};
    for (size_t n = 0; n <= DSI_ARRAY_SIZE(words); n++)
        CHECK(dsi_hash64_words(words, n, 0x7157) == dsi_hash64(words, n * sizeof(*words), 0x7157));
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < 1000; i++) {
        int64_t w[3];
        for (int j = 0; j < 3; j++) {
            x = dsi_hash_mix64(x + 1);
            w[j] = (int64_t)(x >> (x % 64));
        }
        CHECK(dsi_hash64_words(w, 3, (uint64_t)i) == dsi_hash64(w, sizeof(w), (uint64_t)i));
        uint64_t h = dsi_fnv64_words(dsi_fnv64_seed((uint64_t)i), w, 1);
        CHECK(dsi_hash_mix64(dsi_fnv64_words(h, w + 1, 2)) ==
              dsi_hash64(w, sizeof(w), (uint64_t)i));
    }
}

static void test_params(void)
{
    CHECK(ds_param_count() >= 5);
    const char *env, *def, *help, *current;
    CHECK_OK(ds_param_describe(0, &env, &def, &help, &current));
    CHECK(strncmp(env, "DS_", 3) == 0 && help[0] != '\0');
    CHECK_FAILS(ds_param_describe(ds_param_count(), &env, &def, &help, &current),
                DS_ERR_INVALID_ARG, "out of range");
    CHECK(dsi_param_int(DSI_PARAM_MAX_TARGET_GPUS) == 1048576);
    CHECK(dsi_param_int(DSI_PARAM_DEFAULT_GPUS_PER_NODE) == 8);
}

int main(void)
{
    test_status();
    test_parse();
    test_parse_public();
    test_parse_lists();
    test_strbuf_and_hash();
    test_params();
    return check_summary("test_core");
}
