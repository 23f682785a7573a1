/* Event keys: hashing, equality, names and text. */
#include <dsmpi/events.h>

#include "dsi_core.h"

#include <string.h>

_Static_assert(sizeof(ds_event_key_t) == 56, "ds_event_key_t must have no padding");
_Static_assert(sizeof(ds_event_key_t) % sizeof(int64_t) == 0, "keys are hashed as words");

static const char *const op_names[DS_OP_COUNT_] = {
    "gemm",     "bgemm",        "softmax",       "layernorm",   "rmsnorm", "gelu",
    "relu",     "swiglu",       "geglu",         "dropout_add", "add",     "dropout",
    "rope",     "embedding",    "cross_entropy", "optimizer",   "pool",    "flash_attention",
    "fp8_cast", "moe_aux_loss", "framework_gap",
};
static const char *const comm_names[DS_COMM_COUNT_] = {
    "sendrecv", "allreduce", "allgather", "reduce_scatter",
    "alltoall", "broadcast", "ps_push",   "ps_pull",
};
static const char *const pass_names[] = {"fwd", "bwd", "recompute", "step"};
static const char *const group_names[DS_GROUP_COUNT_] = {"-",  "tp", "pp", "dp", "embedding",
                                                         "mp", "cp", "ep", "edp"};
static const char *const class_names[DS_CLASS_COUNT_] = {"compute", "tp-comm", "pp-p2p", "dp-comm",
                                                         "other-comm"};
static const char *const algo_names[] = {"", "ring", "tree", "hierarchical", "ps"};

uint64_t ds_event_key_hash(const ds_event_key_t *key)
{
    /* The display-only group byte is left out: equal work in two groups is one event. */
    ds_event_key_t copy = *key;
    copy.group = 0;
    /* Word by word, one multiplication each, then the splitmix finaliser: a
     * lookup hashes a key on every cost query, and the value is never stored. */
    uint64_t words[sizeof(copy) / sizeof(uint64_t)];
    memcpy(words, &copy, sizeof(words));
    uint64_t h = 0x64736d7069ULL;
    for (size_t i = 0; i < DSI_ARRAY_SIZE(words); i++) {
        h = (h ^ words[i]) * 0x9e3779b97f4a7c15ULL;
        h ^= h >> 32;
    }
    return dsi_hash_mix64(h);
}

int ds_event_key_equal(const ds_event_key_t *a, const ds_event_key_t *b)
{
    ds_event_key_t x = *a, y = *b;
    x.group = 0;
    y.group = 0;
    return memcmp(&x, &y, sizeof(x)) == 0;
}

const char *ds_event_key_op_name(const ds_event_key_t *key)
{
    if (key->kind == DS_EVENT_COMPUTE)
        return key->op < DS_OP_COUNT_ ? op_names[key->op] : "?";
    return key->op < DS_COMM_COUNT_ ? comm_names[key->op] : "?";
}

const char *ds_pass_name(ds_pass_t pass)
{
    return (unsigned)pass < DSI_ARRAY_SIZE(pass_names) ? pass_names[pass] : "?";
}

const char *ds_group_name(ds_group_t group)
{
    return (unsigned)group < DS_GROUP_COUNT_ ? group_names[group] : "?";
}

ds_event_class_t ds_event_class_of(const ds_event_key_t *key)
{
    if (key->kind == DS_EVENT_COMPUTE)
        return DS_CLASS_COMPUTE;
    switch (key->group) {
    case DS_GROUP_TP: return DS_CLASS_TP;
    case DS_GROUP_PP: return DS_CLASS_PP;
    case DS_GROUP_DP:
    case DS_GROUP_EDP: return DS_CLASS_DP;
    default: return DS_CLASS_OTHER; /* EP dispatch and combine among them */
    }
}

const char *ds_event_class_name(ds_event_class_t event_class)
{
    return (unsigned)event_class < DS_CLASS_COUNT_ ? class_names[event_class] : "?";
}

void ds_event_key_format(const ds_event_key_t *key, char *text, size_t size)
{
    if (size == 0)
        return;
    dsi_strbuf_t buf; /* formats into `text`: nothing to allocate, nothing to fail */
    dsi_strbuf_init_fixed(&buf, text, size);
    dsi_strbuf_appendf(&buf, "%s %s %s", ds_event_key_op_name(key),
                       ds_pass_name((ds_pass_t)key->pass), ds_dtype_name((ds_dtype_t)key->dtype));
    if (key->kind == DS_EVENT_COMM) {
        dsi_strbuf_appendf(&buf, " bytes=%lld group=%s:%d nodes=%d per-node=%d conc=%d",
                           (long long)key->dims[0], ds_group_name((ds_group_t)key->group),
                           key->group_size, key->nodes, key->ranks_per_node, key->concurrency);
        if (key->node_stride > 0)
            dsi_strbuf_appendf(&buf, " stride=%d", key->node_stride);
        if (key->dims[2] > 0)
            dsi_strbuf_appendf(&buf, " leaf-nodes=%lld", (long long)key->dims[2]);
        if (key->dims[1] > 0)
            dsi_strbuf_appendf(&buf, " servers=%lld", (long long)key->dims[1]);
        if (key->flags & DS_COMM_FLAG_BATCHED)
            dsi_strbuf_append(&buf, " batched");
        if (key->flags & DS_COMM_FLAG_OVERLAPPED)
            dsi_strbuf_append(&buf, " overlapped");
        if (key->variant > 0 && key->variant < DSI_ARRAY_SIZE(algo_names))
            dsi_strbuf_appendf(&buf, " algo=%s", algo_names[key->variant]);
    } else if (key->op == DS_OP_GEMM || key->op == DS_OP_BATCHED_GEMM) {
        dsi_strbuf_appendf(&buf, " %c%c m=%lld n=%lld k=%lld",
                           (key->variant & DS_GEMM_TRANS_A) ? 'T' : 'N',
                           (key->variant & DS_GEMM_TRANS_B) ? 'T' : 'N', (long long)key->dims[0],
                           (long long)key->dims[1], (long long)key->dims[2]);
        if (key->op == DS_OP_BATCHED_GEMM)
            dsi_strbuf_appendf(&buf, " batch=%lld", (long long)key->dims[3]);
    } else if (key->op == DS_OP_FLASH_ATTENTION) {
        ds_attention_shape_t a = ds_attention_shape_of(key);
        dsi_strbuf_appendf(
            &buf, " batch=%lld heads=%lld kv-heads=%lld seq=%lld kv-seq=%lld head-dim=%lld",
            (long long)a.batch, (long long)a.heads, (long long)a.kv_heads, (long long)a.seq_q,
            (long long)a.seq_k, (long long)a.head_dim);
        if (key->variant)
            dsi_strbuf_append(&buf, " causal");
    } else if (key->op == DS_OP_OPTIMIZER) {
        dsi_strbuf_appendf(&buf, " params=%lld", (long long)key->dims[0]);
    } else if (key->op == DS_OP_FRAMEWORK_GAP) {
        dsi_strbuf_appendf(&buf, " ops=%lld part=%lld", (long long)key->dims[0],
                           (long long)key->dims[1]);
    } else if (key->op == DS_OP_EMBEDDING) {
        dsi_strbuf_appendf(&buf, " tokens=%lld hidden=%lld vocab=%lld", (long long)key->dims[0],
                           (long long)key->dims[1], (long long)key->dims[2]);
    } else {
        dsi_strbuf_appendf(&buf, " rows=%lld cols=%lld", (long long)key->dims[0],
                           (long long)key->dims[1]);
        if (key->op == DS_OP_SOFTMAX && key->variant)
            dsi_strbuf_append(&buf, " causal");
    }
    dsi_strbuf_free(&buf);
}

static int find_name(const char *const *names, size_t count, const char *word)
{
    for (size_t i = 0; i < count; i++)
        if (names[i] != NULL && strcmp(names[i], word) == 0)
            return (int)i;
    return -1;
}

static ds_status_t bad_key(const char *text, const char *word, const char *why)
{
    return DSI_ERROR(DS_ERR_INVALID_ARG, "event key '%s': '%s' %s", text, word, why);
}

/* A field of a fused-attention key (ds_attention_shape_t). */
static ds_status_t parse_attention_field(const char *text, const char *name, const char *value,
                                         ds_attention_shape_t *shape)
{
    static const char *const names[] = {"batch", "heads", "kv-heads", "seq", "kv-seq", "head-dim"};
    int64_t *fields[] = {&shape->batch, &shape->heads, &shape->kv_heads,
                         &shape->seq_q, &shape->seq_k, &shape->head_dim};
    int i = find_name(names, DSI_ARRAY_SIZE(names), name);
    if (i < 0)
        return bad_key(text, name,
                       "is not an attention field (accepted: batch, heads, kv-heads, seq, kv-seq, "
                       "head-dim)");
    /* Heads and lengths share a dim two by two: each below 2^31. */
    return dsi_parse_i64(value, name, 0, i == 0 || i == 5 ? INT64_MAX : INT32_MAX, false,
                         fields[i]);
}

ds_status_t ds_event_key_parse(const char *text, ds_event_key_t *key_out)
{
    char copy[512];
    if (strlen(text) >= sizeof(copy))
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "event key of %zu characters is too long (accepted: at most %zu)",
                         strlen(text), sizeof(copy) - 1);
    strcpy(copy, text);
    ds_event_key_t key;
    memset(&key, 0, sizeof(key));
    char *save = NULL;
    char *word = strtok_r(copy, " \t", &save);
    if (word == NULL)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "event key is empty");
    int op = find_name(op_names, DS_OP_COUNT_, word);
    if (op >= 0) {
        key.kind = DS_EVENT_COMPUTE;
    } else if ((op = find_name(comm_names, DS_COMM_COUNT_, word)) >= 0) {
        key.kind = DS_EVENT_COMM;
    } else {
        return bad_key(text, word, "is not an operator or primitive");
    }
    key.op = (uint8_t)op;
    word = strtok_r(NULL, " \t", &save);
    int pass = word ? find_name(pass_names, DSI_ARRAY_SIZE(pass_names), word) : -1;
    if (pass < 0)
        return bad_key(text, word ? word : "",
                       "is not a pass (accepted: fwd, bwd, recompute, step)");
    key.pass = (uint8_t)pass;
    word = strtok_r(NULL, " \t", &save);
    ds_dtype_t dtype;
    if (word == NULL || ds_dtype_parse(word, &dtype) != DS_OK)
        return bad_key(text, word ? word : "", "is not a dtype (accepted: fp32, bf16, fp16, fp8)");
    key.dtype = (uint8_t)dtype;
    bool attention = key.kind == DS_EVENT_COMPUTE && key.op == DS_OP_FLASH_ATTENTION;
    ds_attention_shape_t shape = {0, 0, 0, 0, 0, 0};
    while ((word = strtok_r(NULL, " \t", &save)) != NULL) {
        if (strcmp(word, "batched") == 0) {
            key.flags |= DS_COMM_FLAG_BATCHED;
            continue;
        }
        if (strcmp(word, "overlapped") == 0) {
            key.flags |= DS_COMM_FLAG_OVERLAPPED;
            continue;
        }
        if (strcmp(word, "causal") == 0) {
            key.variant = 1;
            continue;
        }
        if (strlen(word) == 2 && strchr("NT", word[0]) && strchr("NT", word[1])) {
            key.variant = (uint8_t)((word[0] == 'T' ? DS_GEMM_TRANS_A : 0) |
                                    (word[1] == 'T' ? DS_GEMM_TRANS_B : 0));
            continue;
        }
        char *eq = strchr(word, '=');
        if (eq == NULL)
            return bad_key(text, word, "is not a field (expected name=value)");
        *eq = '\0';
        const char *value = eq + 1;
        if (attention) {
            DSI_TRY(parse_attention_field(text, word, value, &shape));
            continue;
        }
        if (strcmp(word, "group") == 0) {
            char *colon = strchr(value, ':');
            if (colon == NULL)
                return bad_key(text, value, "is not group=name:size");
            *colon = '\0';
            int group = find_name(group_names, DS_GROUP_COUNT_, value);
            if (group < 0)
                return bad_key(text, value,
                               "is not a group (accepted: tp, pp, dp, embedding, mp, cp)");
            key.group = (uint8_t)group;
            DSI_TRY(dsi_parse_int(colon + 1, "group size", 1, INT32_MAX, &key.group_size));
            continue;
        }
        if (strcmp(word, "algo") == 0) {
            int algo = find_name(algo_names, DSI_ARRAY_SIZE(algo_names), value);
            if (algo <= 0)
                return bad_key(text, value,
                               "is not an algorithm (accepted: ring, tree, hierarchical, ps)");
            key.variant = (uint8_t)algo;
            continue;
        }
        static const struct {
            const char *name;
            int slot; /* 0..3 dims; 10 nodes, 11 per-node, 12 conc, 13 stride */
        } fields[] = {{"m", 0},          {"n", 1},         {"k", 2},      {"batch", 3},
                      {"rows", 0},       {"cols", 1},      {"params", 0}, {"tokens", 0},
                      {"hidden", 1},     {"vocab", 2},     {"bytes", 0},  {"servers", 1},
                      {"nodes", 10},     {"per-node", 11}, {"conc", 12},  {"stride", 13},
                      {"leaf-nodes", 2}, {"ops", 0},       {"part", 1}};
        int slot = -1;
        for (size_t i = 0; i < DSI_ARRAY_SIZE(fields); i++)
            if (strcmp(word, fields[i].name) == 0)
                slot = fields[i].slot;
        if (slot < 0)
            return bad_key(text, word, "is not a key field");
        int64_t number;
        DSI_TRY(dsi_parse_i64(value, word, 0, INT64_MAX, false, &number));
        if (slot < 4)
            key.dims[slot] = number;
        else if (number > INT32_MAX)
            return bad_key(text, value, "is too large");
        else if (slot == 10)
            key.nodes = (int32_t)number;
        else if (slot == 11)
            key.ranks_per_node = (int32_t)number;
        else if (slot == 13 && (number == 1 || number > 255))
            return bad_key(text, value, "is not a node stride (accepted: 0, 2 to 255)");
        else if (slot == 13)
            key.node_stride = (uint8_t)number;
        else
            key.concurrency = (int32_t)number;
    }
    if (attention)
        ds_attention_shape_set(&key, &shape);
    *key_out = key;
    return DS_OK;
}
