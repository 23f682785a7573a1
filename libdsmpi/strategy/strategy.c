/* Strategy text, Megatron option names, validation and rank placement. */
#include <dsmpi/cluster.h>
#include <dsmpi/strategy.h>

#include "dsi_core.h"
#include "dsi_strategy_moe.h"
#include "model/dsi_model.h"

#include <string.h>

#define MAX_DEGREE (1 << 20)

static const char *const schedule_names[] = {"gpipe", "1f1b", "interleaved"};
static const char *const recompute_names[] = {"none", "selective", "full"};
static const char *const fp8_names[] = {"off", "hybrid", "e4m3"};
static const char *const dp_algo_names[] = {"auto", "ring", "tree", "hierarchical", "ps"};
static const char *const dim_names[] = {"tp", "dp", "pp"};
static const char *const cp_comm_names[] = {"p2p", "a2a", "allgather"};

void ds_strategy_init(ds_strategy_t *s)
{
    memset(s, 0, sizeof(*s));
    s->dp = 0;
    s->tp = 1;
    s->pp = 1;
    s->cp = 1;
    s->ep = 1;
    s->mbs = 1;
    s->gbs = 0;
    s->schedule = DS_SCHEDULE_1F1B;
    s->vpp = 1;
    s->recompute = DS_RECOMPUTE_NONE;
    s->dp_algo = DS_DP_AUTO;
    s->overlap_grad_reduce = 1;
    s->grad_reduce_dtype = DS_DTYPE_FP32;
    s->grad_clip = 1;
    s->order[0] = DS_DIM_TP;
    s->order[1] = DS_DIM_DP;
    s->order[2] = DS_DIM_PP;
}

static ds_status_t parse_switch(const char *value, const char *key, int *out)
{
    static const char *const names[] = {"0", "1", "off", "on", "false", "true", "no", "yes"};
    int index = 0;
    DSI_TRY(dsi_parse_choice(value, key, names, DSI_ARRAY_SIZE(names), &index));
    *out = index % 2;
    return DS_OK;
}

static ds_status_t parse_order(const char *value, ds_dim_t order[3])
{
    char copy[32];
    if (strlen(value) >= sizeof(copy))
        goto bad;
    strcpy(copy, value);
    int seen = 0, count = 0;
    bool cp_before = false; /* "cp" named: it must come just before dp */
    for (char *save = NULL, *part = strtok_r(copy, "-", &save); part != NULL;
         part = strtok_r(NULL, "-", &save)) {
        if (strcmp(part, "cp") == 0) {
            if (cp_before)
                goto bad;
            cp_before = true;
            continue;
        }
        if (cp_before && strcmp(part, "dp") != 0)
            goto bad;
        cp_before = false;
        int index = -1;
        for (int i = 0; i < 3; i++)
            if (strcmp(part, dim_names[i]) == 0)
                index = i;
        if (index < 0 || (seen & (1 << index)) || count == 3)
            goto bad;
        seen |= 1 << index;
        order[count++] = (ds_dim_t)index;
    }
    if (count == 3 && !cp_before)
        return DS_OK;
bad:
    return DSI_ERROR(DS_ERR_INVALID_ARG,
                     "order '%s' is not accepted (accepted: a permutation of tp, dp, pp, innermost "
                     "first, e.g. tp-dp-pp; cp may be named just before dp, where it always sits)",
                     value);
}

/* One key=value (or flag) of the strategy grammar. */
static ds_status_t apply_pair(ds_strategy_t *s, const char *key, const char *value)
{
    static const char *const flags[] = {
        "sp",           "no-sp", "overlap", "no-overlap", "no-clip", "flash", "embedding-in-split",
        "loss-in-split"};
    if (value == NULL) {
        for (size_t i = 0; i < DSI_ARRAY_SIZE(flags); i++) {
            if (strcmp(key, flags[i]) != 0)
                continue;
            switch (i) {
            case 0: s->sp = 1; break;
            case 1: s->sp = 0; break;
            case 2: s->overlap_grad_reduce = 1; break;
            case 3: s->overlap_grad_reduce = 0; break;
            case 4: s->grad_clip = 0; break;
            case 5: s->flash_attention = 1; break;
            case 6: s->embedding_in_split = 1; break;
            case 7: s->loss_in_split = 1; break;
            }
            return DS_OK;
        }
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "strategy item '%s' has no value (accepted flags: sp, no-sp, overlap, "
                         "no-overlap, no-clip, flash, embedding-in-split, loss-in-split; or "
                         "key=value)",
                         key);
    }
    int index = 0;
    int64_t big;
    if (strcmp(key, "dp") == 0)
        return dsi_parse_int(value, "dp", 1, MAX_DEGREE, &s->dp);
    if (strcmp(key, "tp") == 0)
        return dsi_parse_int(value, "tp", 1, MAX_DEGREE, &s->tp);
    if (strcmp(key, "pp") == 0)
        return dsi_parse_int(value, "pp", 1, MAX_DEGREE, &s->pp);
    if (strcmp(key, "cp") == 0)
        return dsi_parse_int(value, "cp", 1, MAX_DEGREE, &s->cp);
    if (strcmp(key, "ep") == 0)
        return dsi_parse_int(value, "ep", 1, MAX_DEGREE, &s->ep);
    if (strcmp(key, "cp-comm") == 0) {
        DSI_TRY(dsi_parse_choice(value, "cp-comm", cp_comm_names, 3, &index));
        s->cp_comm = (ds_cp_comm_t)index;
        return DS_OK;
    }
    if (strcmp(key, "mbs") == 0)
        return dsi_parse_size_int(value, "mbs", 1, 1 << 24, &s->mbs);
    if (strcmp(key, "gbs") == 0)
        return ds_parse_size(value, "gbs", 1, 1LL << 32, &s->gbs);
    if (strcmp(key, "vpp") == 0) {
        DSI_TRY(dsi_parse_int(value, "vpp", 1, 1 << 16, &s->vpp));
        if (s->vpp > 1)
            s->schedule = DS_SCHEDULE_INTERLEAVED;
        return DS_OK;
    }
    if (strcmp(key, "schedule") == 0) {
        DSI_TRY(dsi_parse_choice(value, "schedule", schedule_names, 3, &index));
        s->schedule = (ds_schedule_t)index;
        return DS_OK;
    }
    if (strcmp(key, "sp") == 0)
        return parse_switch(value, "sp", &s->sp);
    if (strcmp(key, "zero") == 0)
        return dsi_parse_int(value, "zero", 0, 3, &s->zero);
    if (strcmp(key, "recompute") == 0) {
        DSI_TRY(dsi_parse_choice(value, "recompute", recompute_names, 3, &index));
        s->recompute = (ds_recompute_t)index;
        return DS_OK;
    }
    if (strcmp(key, "dp-algo") == 0) {
        DSI_TRY(dsi_parse_choice(value, "dp-algo", dp_algo_names, 5, &index));
        s->dp_algo = (ds_dp_algo_t)index;
        return DS_OK;
    }
    if (strcmp(key, "ps-servers") == 0)
        return dsi_parse_int(value, "ps-servers", 1, MAX_DEGREE, &s->ps_servers);
    if (strcmp(key, "bucket") == 0) {
        DSI_TRY(dsi_parse_i64(value, "bucket", 1, 1LL << 40, true, &big));
        s->bucket_params = big;
        return DS_OK;
    }
    if (strcmp(key, "overlap") == 0)
        return parse_switch(value, "overlap", &s->overlap_grad_reduce);
    if (strcmp(key, "clip") == 0)
        return parse_switch(value, "clip", &s->grad_clip);
    if (strcmp(key, "flash") == 0)
        return parse_switch(value, "flash", &s->flash_attention);
    if (strcmp(key, "fp8") == 0) {
        DSI_TRY(dsi_parse_choice(value, "fp8", fp8_names, 3, &index));
        s->fp8 = (ds_fp8_t)index;
        return DS_OK;
    }
    if (strcmp(key, "grad-reduce-dtype") == 0) {
        ds_dtype_t dtype;
        DSI_TRY(ds_dtype_parse(value, &dtype));
        s->grad_reduce_dtype = dtype;
        return DS_OK;
    }
    if (strcmp(key, "first-stage-layers") == 0)
        return dsi_parse_int(value, "first-stage-layers", 1, 1 << 20, &s->first_stage_layers);
    if (strcmp(key, "last-stage-layers") == 0)
        return dsi_parse_int(value, "last-stage-layers", 1, 1 << 20, &s->last_stage_layers);
    if (strcmp(key, "embedding-in-split") == 0)
        return parse_switch(value, "embedding-in-split", &s->embedding_in_split);
    if (strcmp(key, "loss-in-split") == 0)
        return parse_switch(value, "loss-in-split", &s->loss_in_split);
    if (strcmp(key, "order") == 0)
        return parse_order(value, s->order);
    bool moe_key = false;
    DSI_TRY(dsi_strategy_apply_moe(s, key, value, &moe_key));
    if (moe_key)
        return DS_OK;
    return DSI_ERROR(
        DS_ERR_INVALID_ARG,
        "strategy key '%s' is not known (accepted: dp, tp, pp, cp, ep, mbs, gbs, schedule, vpp, "
        "sp, zero, recompute, dp-algo, ps-servers, bucket, overlap, clip, flash, fp8, "
        "grad-reduce-dtype, first-stage-layers, last-stage-layers, embedding-in-split, "
        "loss-in-split, order, cp-comm, etp, "
        "moe-dispatcher, moe-topk, router-skew, moe-capacity)",
        key);
}

ds_status_t ds_strategy_parse(const char *text, ds_strategy_t *strategy)
{
    if (text == NULL || *text == '\0')
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "strategy is empty (accepted: e.g. dp=16,tp=8,pp=8,mbs=1,schedule=1f1b)");
    if (strlen(text) >= 1024)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "strategy text of %zu characters is too long (accepted: at most 1023)",
                         strlen(text));
    char copy[1024];
    strcpy(copy, text);
    ds_strategy_t s = *strategy; /* written back only when every item parsed */
    for (char *save = NULL, *item = strtok_r(copy, ",", &save); item != NULL;
         item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (eq != NULL)
            *eq = '\0';
        DSI_TRY(apply_pair(&s, item, eq != NULL ? eq + 1 : NULL));
    }
    *strategy = s;
    return DS_OK;
}

/* Megatron-LM options and what they are in the strategy grammar: the key
 * their value sets, or the item a flag stands for. */
static const struct {
    const char *megatron;
    const char *key;  /* --option VALUE is key=VALUE */
    const char *item; /* --flag is this item */
} megatron_names[] = {
    {"tensor-model-parallel-size", "tp", NULL},
    {"pipeline-model-parallel-size", "pp", NULL},
    {"data-parallel-size", "dp", NULL},
    {"context-parallel-size", "cp", NULL},
    {"cp-comm-type", "cp-comm", NULL},
    {"expert-model-parallel-size", "ep", NULL},
    {"micro-batch-size", "mbs", NULL},
    {"global-batch-size", "gbs", NULL},
    {"virtual-pipeline-model-parallel-size", "vpp", NULL},
    {"recompute-granularity", "recompute", NULL},
    {"decoder-first-pipeline-num-layers", "first-stage-layers", NULL},
    {"decoder-last-pipeline-num-layers", "last-stage-layers", NULL},
    {"account-for-embedding-in-pipeline-split", NULL, "embedding-in-split"},
    {"account-for-loss-in-pipeline-split", NULL, "loss-in-split"},
    {"sequence-parallel", NULL, "sp"},
    {"recompute-activations", NULL, "recompute=selective"},
    {"use-distributed-optimizer", NULL, "zero=1"},
    {"overlap-grad-reduce", NULL, "overlap"},
    {"use-flash-attn", NULL, "flash"},
    {"fp8-format", "fp8", NULL},
};

/* Megatron-Core's --attention-backend: flash, fused (cuDNN) and auto run a
 * fused kernel; unfused and local the explicit softmax. */
static ds_status_t attention_backend_item(const char *value, const char **item_p)
{
    static const char *const fused[] = {"flash", "fused", "auto"};
    static const char *const explicit_softmax[] = {"unfused", "local"};
    for (size_t i = 0; value != NULL && i < DSI_ARRAY_SIZE(fused); i++)
        if (strcmp(value, fused[i]) == 0) {
            *item_p = "flash=on";
            return DS_OK;
        }
    for (size_t i = 0; value != NULL && i < DSI_ARRAY_SIZE(explicit_softmax); i++)
        if (strcmp(value, explicit_softmax[i]) == 0) {
            *item_p = "flash=off";
            return DS_OK;
        }
    return DSI_ERROR(DS_ERR_INVALID_ARG,
                     "--attention-backend %s is not known (accepted: flash, fused, auto, unfused, "
                     "local)",
                     value != NULL ? value : "(none)");
}

static ds_status_t megatron_lookup(const char *option, const char *value, size_t *index_p)
{
    for (size_t i = 0; i < DSI_ARRAY_SIZE(megatron_names); i++)
        if (strcmp(option, megatron_names[i].megatron) == 0) {
            if (megatron_names[i].key != NULL && value == NULL)
                return DSI_ERROR(DS_ERR_INVALID_ARG, "--%s needs a value", option);
            *index_p = i;
            return DS_OK;
        }
    return DSI_ERROR(DS_ERR_INVALID_ARG, "Megatron option --%s is not known here", option);
}

/* Transformer Engine's delayed-scaling settings change numbers, not the
 * work: checked, then kept out of the strategy. */
static ds_status_t check_fp8_amax(const char *option, const char *value)
{
    if (strcmp(option, "fp8-amax-history-len") == 0) {
        int length;
        return dsi_parse_int(value, option, 1, 1 << 20, &length);
    }
    if (strcmp(option, "fp8-amax-compute-algo") == 0) {
        static const char *const algos[] = {"max", "most_recent"};
        int index;
        return dsi_parse_choice(value, option, algos, 2, &index);
    }
    return DSI_ERROR(DS_ERR_INVALID_ARG,
                     "Megatron option --%s is not known here (accepted: --fp8-amax-history-len, "
                     "--fp8-amax-compute-algo)",
                     option);
}

ds_status_t ds_strategy_apply_megatron(ds_strategy_t *s, const char *option, const char *value)
{
    if (strcmp(option, "num-layers-per-virtual-pipeline-stage") == 0) {
        DSI_TRY(dsi_parse_int(value, option, 1, 1 << 20, &s->layers_per_virtual_stage));
        s->schedule = DS_SCHEDULE_INTERLEAVED;
        return DS_OK;
    }
    if (strcmp(option, "use-distributed-optimizer") == 0) { /* keeps a higher ZeRO stage */
        s->zero = s->zero > 1 ? s->zero : 1;
        return DS_OK;
    }
    if (strcmp(option, "attention-backend") == 0) {
        const char *item;
        DSI_TRY(attention_backend_item(value, &item));
        return ds_strategy_parse(item, s);
    }
    if (strncmp(option, "fp8-amax-", 9) == 0)
        return check_fp8_amax(option, value);
    const char *moe_key = NULL;
    bool moe_option = false;
    ds_status_t moe_status = dsi_strategy_megatron_moe(option, value, &moe_key, &moe_option);
    if (moe_option)
        return moe_status != DS_OK || moe_key == NULL ? moe_status : apply_pair(s, moe_key, value);
    size_t i;
    DSI_TRY(megatron_lookup(option, value, &i));
    if (megatron_names[i].key != NULL)
        return apply_pair(s, megatron_names[i].key, value);
    return ds_strategy_parse(megatron_names[i].item, s);
}

ds_status_t ds_strategy_megatron_item(const char *option, const char *value, char *text,
                                      size_t size)
{
    if (strcmp(option, "num-layers-per-virtual-pipeline-stage") == 0)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "--%s has no strategy item (accepted: vpp=N, the virtual stages per "
                         "pipeline rank)",
                         option);
    if (strncmp(option, "fp8-amax-", 9) == 0) {
        DSI_TRY(check_fp8_amax(option, value));
        if (size > 0)
            text[0] = '\0'; /* no item: the work is the same */
        return DS_OK;
    }
    if (strcmp(option, "attention-backend") == 0) {
        const char *item;
        DSI_TRY(attention_backend_item(value, &item));
        int n = snprintf(text, size, "%s", item);
        if (n < 0 || (size_t)n >= size)
            return DSI_ERROR(DS_ERR_INVALID_ARG, "--%s: the item does not fit in %zu characters",
                             option, size);
        return DS_OK;
    }
    const char *moe_key = NULL;
    bool moe_option = false;
    ds_status_t moe_status = dsi_strategy_megatron_moe(option, value, &moe_key, &moe_option);
    if (moe_option) {
        DSI_TRY(moe_status);
        ds_strategy_t probe;
        ds_strategy_init(&probe);
        DSI_TRY(ds_strategy_apply_megatron(&probe, option, value)); /* a bad value fails here */
        int n = moe_key != NULL ? snprintf(text, size, "%s=%s", moe_key, value)
                                : snprintf(text, size, "%s", "");
        if (n < 0 || (size_t)n >= size)
            return DSI_ERROR(DS_ERR_INVALID_ARG, "--%s: the item does not fit in %zu characters",
                             option, size);
        return DS_OK;
    }
    size_t i;
    DSI_TRY(megatron_lookup(option, value, &i));
    ds_strategy_t check;
    ds_strategy_init(&check);
    DSI_TRY(ds_strategy_apply_megatron(&check, option, value)); /* a bad value fails here */
    int n = megatron_names[i].key != NULL
                ? snprintf(text, size, "%s=%s", megatron_names[i].key, value)
                : snprintf(text, size, "%s", megatron_names[i].item);
    if (n < 0 || (size_t)n >= size)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "--%s %.40s: the item does not fit in %zu characters",
                         option, value != NULL ? value : "", size);
    return DS_OK;
}

void ds_strategy_format(const ds_strategy_t *s, char *text, size_t size)
{
    if (size == 0)
        return;
    dsi_strbuf_t buf; /* formats into `text`: nothing to allocate, nothing to fail */
    dsi_strbuf_init_fixed(&buf, text, size);
    dsi_strbuf_appendf(&buf, "dp=%d,tp=%d,pp=%d", s->dp, s->tp, s->pp);
    if (s->cp > 1)
        dsi_strbuf_appendf(&buf, ",cp=%d", s->cp);
    if (s->cp > 1 && s->cp_comm != DS_CP_COMM_P2P)
        dsi_strbuf_appendf(&buf, ",cp-comm=%s", cp_comm_names[s->cp_comm]);
    dsi_strbuf_appendf(&buf, ",mbs=%d", s->mbs);
    if (s->gbs > 0)
        dsi_strbuf_appendf(&buf, ",gbs=%lld", (long long)s->gbs);
    dsi_strbuf_appendf(&buf, ",schedule=%s", schedule_names[s->schedule]);
    if (s->vpp > 1)
        dsi_strbuf_appendf(&buf, ",vpp=%d", s->vpp);
    if (s->sp)
        dsi_strbuf_append(&buf, ",sp");
    if (s->flash_attention)
        dsi_strbuf_append(&buf, ",flash");
    if (s->fp8 != DS_FP8_OFF)
        dsi_strbuf_appendf(&buf, ",fp8=%s", fp8_names[s->fp8]);
    if (s->zero)
        dsi_strbuf_appendf(&buf, ",zero=%d", s->zero);
    if (s->recompute != DS_RECOMPUTE_NONE)
        dsi_strbuf_appendf(&buf, ",recompute=%s", recompute_names[s->recompute]);
    if (s->dp_algo != DS_DP_AUTO)
        dsi_strbuf_appendf(&buf, ",dp-algo=%s", dp_algo_names[s->dp_algo]);
    if (s->ps_servers)
        dsi_strbuf_appendf(&buf, ",ps-servers=%d", s->ps_servers);
    if (s->bucket_params)
        dsi_strbuf_appendf(&buf, ",bucket=%lld", (long long)s->bucket_params);
    if (!s->overlap_grad_reduce)
        dsi_strbuf_append(&buf, ",no-overlap");
    if (s->grad_reduce_dtype != DS_DTYPE_FP32)
        dsi_strbuf_appendf(&buf, ",grad-reduce-dtype=%s", ds_dtype_name(s->grad_reduce_dtype));
    if (!s->grad_clip)
        dsi_strbuf_append(&buf, ",no-clip");
    if (s->first_stage_layers)
        dsi_strbuf_appendf(&buf, ",first-stage-layers=%d", s->first_stage_layers);
    if (s->last_stage_layers)
        dsi_strbuf_appendf(&buf, ",last-stage-layers=%d", s->last_stage_layers);
    if (s->embedding_in_split)
        dsi_strbuf_append(&buf, ",embedding-in-split");
    if (s->loss_in_split)
        dsi_strbuf_append(&buf, ",loss-in-split");
    dsi_strategy_format_moe(s, &buf);
    if (s->order[0] != DS_DIM_TP || s->order[1] != DS_DIM_DP)
        dsi_strbuf_appendf(&buf, ",order=%s-%s-%s", dim_names[s->order[0]], dim_names[s->order[1]],
                           dim_names[s->order[2]]);
    dsi_strbuf_free(&buf);
}

/* ---- validation ------------------------------------------------------------
 * One set of checks decides both whether a strategy is accepted and which
 * values an error message suggests: a suggested tp or pp is one with which the
 * strategy passes every check (dp derived again from the target). */

typedef enum suggest_field { SUGGEST_TP, SUGGEST_PP } suggest_field_t;

typedef struct resolve_ctx {
    const ds_strategy_t *given; /* the strategy as the caller gave it */
    const ds_model_t *model;
    int64_t target_gpus;
    int gpus_per_node;
    bool quiet; /* trying a suggestion: refusals are returned, not recorded */
} resolve_ctx_t;

/* A refusal: the error message, or only the status while trying suggestions. */
#define REFUSE(ctx, ...)                                                                           \
    ((ctx)->quiet ? DS_ERR_INVALID_ARG : DSI_ERROR(DS_ERR_INVALID_ARG, __VA_ARGS__))

#define MAX_SUGGESTION_TEXT 256

static ds_status_t resolve(const resolve_ctx_t *ctx, ds_strategy_t *resolved_p);

/* Every check of tp against the model: the features a layer list splits, or
 * the attention heads, key/value heads and MLP columns, and with sp the tokens
 * of a sequence. */
static ds_status_t check_tp(const resolve_ctx_t *ctx, const ds_strategy_t *s);
/* Every check of pp (and vpp, uneven stages) against the layers. */
static ds_status_t check_stages(const resolve_ctx_t *ctx, const ds_strategy_t *s);

static void append_value(char *text, size_t size, int value, bool *full_p)
{
    size_t used = strlen(text);
    if (*full_p || used + 24 > size) {
        if (!*full_p && used + 5 <= size)
            snprintf(text + used, size - used, ", ...");
        *full_p = true;
        return;
    }
    snprintf(text + used, size - used, "%s%d", used ? ", " : "", value);
}

/* The values of `field` with which the strategy as given passes every check,
 * dp derived from the target ("1, 2, 4").  When none does (another field is
 * wrong too), the values that pass the field's own checks, said so. */
static void suggest(const resolve_ctx_t *ctx, suggest_field_t field, char *text, size_t size)
{
    resolve_ctx_t trial = *ctx;
    trial.quiet = true;
    const ds_strategy_t *given = ctx->given;
    int64_t other = field == SUGGEST_TP ? given->pp : given->tp;
    int64_t limit = ctx->target_gpus / (other > 0 ? other : 1);
    if (field == SUGGEST_PP && limit > ctx->model->info.num_layers)
        limit = ctx->model->info.num_layers;
    limit = DSI_MIN(limit, (int64_t)MAX_DEGREE);
    char own[MAX_SUGGESTION_TEXT] = "";
    bool full = false, own_full = false;
    text[0] = '\0';
    for (int64_t value = 1; value <= limit; value++) {
        if (ctx->target_gpus % (value * other) != 0)
            continue; /* tp*pp must divide the target */
        ds_strategy_t probe = *given, resolved;
        probe.dp = 0;
        if (field == SUGGEST_TP)
            probe.tp = (int)value;
        else
            probe.pp = (int)value;
        trial.given = &probe;
        if (resolve(&trial, &resolved) == DS_OK)
            append_value(text, size, (int)value, &full);
        else if ((field == SUGGEST_TP ? check_tp(&trial, &probe) : check_stages(&trial, &probe)) ==
                 DS_OK)
            append_value(own, sizeof(own), (int)value, &own_full);
    }
    if (text[0] != '\0' && given->dp != 0 && !full)
        snprintf(text + strlen(text), size - strlen(text), " with dp derived from the target");
    else if (text[0] == '\0' && own[0] != '\0')
        snprintf(text, size,
                 "none with the rest of this strategy; %s values its model and target allow: %s",
                 field == SUGGEST_TP ? "tp" : "pp", own);
    else if (text[0] == '\0')
        snprintf(text, size, "none");
}

static ds_status_t check_divides(const resolve_ctx_t *ctx, const char *counted, int64_t count,
                                 int tp)
{
    if (count % tp == 0)
        return DS_OK;
    if (ctx->quiet)
        return DS_ERR_INVALID_ARG;
    char accepted[MAX_SUGGESTION_TEXT];
    suggest(ctx, SUGGEST_TP, accepted, sizeof(accepted));
    return DSI_ERROR(DS_ERR_INVALID_ARG, "tp=%d does not divide the %lld %s of %s (accepted: %s)",
                     tp, (long long)count, counted, ctx->model->info.name, accepted);
}

static ds_status_t check_layer_list_tp(const resolve_ctx_t *ctx, int tp)
{
    const ds_model_t *model = ctx->model;
    for (int i = 0; i < model->num_generic; i++) {
        const dsi_generic_layer_t *layer = &model->generic[i];
        for (int j = 0; j < layer->num_ops; j++) {
            const dsi_generic_op_t *op = &layer->ops[j];
            int64_t split = op->split == DSI_TP_COLUMN ? op->cols
                            : op->split == DSI_TP_ROW  ? op->inner
                                                       : 0;
            if (split == 0 || split % tp == 0)
                continue;
            if (ctx->quiet)
                return DS_ERR_INVALID_ARG;
            char accepted[MAX_SUGGESTION_TEXT];
            suggest(ctx, SUGGEST_TP, accepted, sizeof(accepted));
            return DSI_ERROR(DS_ERR_INVALID_ARG,
                             "tp=%d does not divide the %lld features of %s in layer \"%s\" of %s "
                             "(accepted: %s)",
                             tp, (long long)split, op->name, layer->name, model->info.name,
                             accepted);
        }
    }
    return DS_OK;
}

static ds_status_t check_tp(const resolve_ctx_t *ctx, const ds_strategy_t *s)
{
    const ds_model_info_t *info = &ctx->model->info;
    if (info->arch == DS_ARCH_LAYER_LIST) {
        DSI_TRY(check_layer_list_tp(ctx, s->tp));
    } else {
        DSI_TRY(check_divides(ctx, "attention heads", info->num_heads, s->tp));
        DSI_TRY(check_divides(ctx, "key/value heads", info->num_kv_heads, s->tp));
        DSI_TRY(check_divides(ctx, "MLP columns", info->ffn_hidden_size, s->tp));
    }
    if (s->sp && s->tp > 1) {
        DSI_TRY(check_divides(ctx, "tokens of a sequence (sp splits them)", info->seq_len, s->tp));
        if (info->decoder_seq_len > 0)
            DSI_TRY(check_divides(ctx, "decoder tokens (sp splits them)", info->decoder_seq_len,
                                  s->tp));
    }
    return DS_OK;
}

/* embedding-in-split / loss-in-split: L + 1 (+ 1) slots split evenly over
 * the pp x vpp virtual stages, the first (last) of which gives a slot to the
 * embedding (loss); with one slot a virtual stage it holds no transformer
 * layer, as in Llama 3 405B's pipeline. */
static ds_status_t check_split_ends(const resolve_ctx_t *ctx, const ds_strategy_t *s)
{
    int L = ctx->model->info.num_layers;
    int counted = L + (s->embedding_in_split ? 1 : 0) + (s->loss_in_split ? 1 : 0);
    int chunks = s->pp * s->vpp;
    const char *which = s->embedding_in_split && s->loss_in_split ? "embedding-in-split and "
                                                                    "loss-in-split"
                        : s->embedding_in_split                   ? "embedding-in-split"
                                                                  : "loss-in-split";
    if (s->first_stage_layers || s->last_stage_layers)
        return REFUSE(ctx,
                      "%s cannot be combined with first-stage-layers/last-stage-layers "
                      "(accepted: one way to make the ends uneven)",
                      which);
    if (s->pp < 2)
        return REFUSE(ctx, "%s needs pipeline parallelism (accepted: pp >= 2)", which);
    if (counted % chunks != 0)
        return REFUSE(ctx,
                      "%s counts %d layers, which pp*vpp = %d*%d does not divide (accepted: "
                      "pp*vpp dividing the %d layers plus one for the embedding and one for "
                      "the loss where counted)",
                      which, counted, s->pp, s->vpp, L);
    return DS_OK;
}

static ds_status_t check_stages(const resolve_ctx_t *ctx, const ds_strategy_t *s)
{
    const ds_model_info_t *info = &ctx->model->info;
    int L = info->num_layers;
    char accepted[MAX_SUGGESTION_TEXT];
    if (s->pp > L) {
        if (ctx->quiet)
            return DS_ERR_INVALID_ARG;
        suggest(ctx, SUGGEST_PP, accepted, sizeof(accepted));
        return DSI_ERROR(DS_ERR_INVALID_ARG, "pp=%d exceeds the %d layers of %s (accepted: %s)",
                         s->pp, L, info->name, accepted);
    }
    if (s->embedding_in_split || s->loss_in_split)
        return check_split_ends(ctx, s);
    if (s->first_stage_layers || s->last_stage_layers) {
        int ends = (s->first_stage_layers ? 1 : 0) + (s->last_stage_layers ? 1 : 0);
        int middle_stages = s->pp - ends;
        int middle_layers = L - s->first_stage_layers - s->last_stage_layers;
        if (s->pp < 2 || middle_stages < 0 || middle_layers < 0 ||
            (middle_stages == 0 && middle_layers != 0) ||
            (middle_stages > 0 && (middle_layers == 0 || middle_layers % middle_stages != 0)))
            return REFUSE(
                ctx,
                "first-stage-layers=%d, last-stage-layers=%d leave %d layers for %d other stages "
                "(accepted: pp >= 2 and a remainder divisible by the other stages)",
                s->first_stage_layers, s->last_stage_layers, middle_layers, middle_stages);
        int per_middle = middle_stages > 0 ? middle_layers / middle_stages : 0;
        if (s->vpp > 1 &&
            (s->first_stage_layers % s->vpp != 0 || s->last_stage_layers % s->vpp != 0 ||
             per_middle % s->vpp != 0 || (s->first_stage_layers == 0 && per_middle == 0) ||
             (s->last_stage_layers == 0 && per_middle == 0)))
            return REFUSE(ctx,
                          "vpp=%d does not divide every stage's layers (first %d, middle %d, "
                          "last %d; accepted: vpp dividing each, as Megatron-Core splits a "
                          "stage's layers evenly over its virtual stages)",
                          s->vpp, s->first_stage_layers ? s->first_stage_layers : per_middle,
                          per_middle, s->last_stage_layers ? s->last_stage_layers : per_middle);
        return DS_OK;
    }
    int chunks = s->pp * s->vpp;
    if (L % chunks == 0)
        return DS_OK;
    if (ctx->quiet)
        return DS_ERR_INVALID_ARG;
    suggest(ctx, SUGGEST_PP, accepted, sizeof(accepted));
    if (s->vpp > 1)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "pp*vpp = %d*%d does not divide the %d layers of %s (accepted: pp*vpp "
                         "dividing %d; pp with vpp=%d: %s)",
                         s->pp, s->vpp, L, info->name, L, s->vpp, accepted);
    return DSI_ERROR(DS_ERR_INVALID_ARG,
                     "pp=%d does not divide the %d layers of %s (accepted: %s; or give "
                     "first-stage-layers/last-stage-layers)",
                     s->pp, L, info->name, accepted);
}

/* Context parallelism as Megatron-Core runs it: the sequence in 2 cp chunks
 * (each rank takes chunk r and 2 cp - 1 - r, for the causal mask's load
 * balance), only in Transformer Engine's fused attention (its local,
 * unfused attention has no context-parallel path), decoder models only. */
static ds_status_t check_cp(const resolve_ctx_t *ctx, const ds_strategy_t *s)
{
    const ds_model_info_t *info = &ctx->model->info;
    if (s->cp == 1)
        return DS_OK;
    if (info->arch != DS_ARCH_DECODER && info->arch != DS_ARCH_ENCODER)
        return REFUSE(ctx,
                      "cp=%d: context parallelism of %s is not modelled (accepted: cp=1; cp > 1 "
                      "with decoder or encoder transformers)",
                      s->cp, info->name);
    if (s->cp > DSI_MAX_CP)
        return REFUSE(ctx, "cp=%d is more ring steps than modelled (accepted: at most %d)", s->cp,
                      DSI_MAX_CP);
    if (!s->flash_attention)
        return REFUSE(ctx,
                      "cp=%d needs fused attention: Megatron-Core runs context parallelism only in "
                      "Transformer Engine's attention (accepted: flash with cp > 1, or cp=1)",
                      s->cp);
    int64_t chunks = 2LL * s->cp * (s->sp && s->tp > 1 ? s->tp : 1);
    if (info->seq_len % chunks != 0)
        return REFUSE(ctx,
                      "cp=%d splits the %d tokens of a sequence into %lld equal chunks%s "
                      "(accepted: a sequence length divisible by %lld)",
                      s->cp, info->seq_len, (long long)chunks,
                      chunks > 2LL * s->cp ? " (2 cp, times tp with sp)" : " (2 cp)",
                      (long long)chunks);
    if (s->cp_comm == DS_CP_COMM_A2A) {
        /* Ulysses: every rank holds heads / (tp cp) of the whole sequence. */
        int64_t q = info->num_heads / s->tp;
        int64_t kv = info->num_kv_heads >= s->tp ? info->num_kv_heads / s->tp : 1;
        if (q % s->cp != 0 || kv % s->cp != 0)
            return REFUSE(ctx,
                          "cp-comm=a2a with cp=%d splits the %lld query and %lld key/value heads "
                          "per tensor-parallel rank (accepted: cp dividing both, or cp-comm=p2p)",
                          s->cp, (long long)q, (long long)kv);
    }
    return DS_OK;
}

static ds_status_t resolve(const resolve_ctx_t *ctx, ds_strategy_t *resolved_p)
{
    ds_strategy_t s = *ctx->given;
    const ds_model_info_t *info = &ctx->model->info;
    int64_t target_gpus = ctx->target_gpus;
    if (target_gpus < 1)
        return REFUSE(ctx, "target of %lld devices (accepted: at least 1)", (long long)target_gpus);
    DSI_TRY(check_cp(ctx, &s));
    if (s.cp == 1) /* no exchange: the resolved text names none */
        s.cp_comm = DS_CP_COMM_P2P;
    if (s.fp8 != DS_FP8_OFF && info->dtype == DS_DTYPE_FP32)
        return REFUSE(ctx,
                      "fp8=%s needs bf16 or fp16 training (accepted: fp8=off with fp32, or "
                      "--dtype bf16)",
                      fp8_names[s.fp8]);
    /* world = tp * cp * dp * pp */
    int64_t model_parallel = (int64_t)s.tp * s.pp * s.cp;
    const char *mp_name = s.cp > 1 ? "tp*cp*pp" : "tp*pp";
    if (s.dp == 0) {
        if (target_gpus % model_parallel != 0)
            return REFUSE(ctx,
                          "%s = %lld does not divide the %lld target devices (accepted: %s "
                          "dividing %lld)",
                          mp_name, (long long)model_parallel, (long long)target_gpus, mp_name,
                          (long long)target_gpus);
        s.dp = (int)(target_gpus / model_parallel);
    } else if ((int64_t)s.dp * model_parallel != target_gpus) {
        char factors[64];
        if (s.cp > 1)
            snprintf(factors, sizeof(factors), "dp*tp*cp*pp = %d*%d*%d*%d", s.dp, s.tp, s.cp, s.pp);
        else
            snprintf(factors, sizeof(factors), "dp*tp*pp = %d*%d*%d", s.dp, s.tp, s.pp);
        return REFUSE(ctx,
                      "%s = %lld does not equal the %lld target devices (accepted: dp=%lld or "
                      "leave dp out)",
                      factors, (long long)s.dp * model_parallel, (long long)target_gpus,
                      target_gpus % model_parallel == 0 ? (long long)(target_gpus / model_parallel)
                                                        : 0LL);
    }
    if (s.sp && s.tp == 1) {
        if (!ctx->quiet)
            DSI_WARN("sp needs tp > 1; sequence parallelism is off for tp=1");
        s.sp = 0;
    }
    DSI_TRY(check_tp(ctx, &s));
    DSI_TRY(dsi_strategy_check_moe(&s, info, ctx->quiet));
    if (s.layers_per_virtual_stage > 0) {
        int64_t per_rank = info->num_layers / s.pp;
        if (info->num_layers % s.pp != 0 || per_rank % s.layers_per_virtual_stage != 0)
            return REFUSE(ctx,
                          "num-layers-per-virtual-pipeline-stage=%d does not divide the %lld "
                          "layers per pipeline rank",
                          s.layers_per_virtual_stage, (long long)per_rank);
        s.vpp = (int)(per_rank / s.layers_per_virtual_stage);
        s.layers_per_virtual_stage = 0;
    }
    if (s.schedule == DS_SCHEDULE_INTERLEAVED) {
        if (s.pp < 2)
            return REFUSE(ctx, "schedule=interleaved needs pp >= 2 (got pp=%d)", s.pp);
        if (s.vpp < 2)
            return REFUSE(ctx, "schedule=interleaved needs vpp >= 2 (got vpp=%d)", s.vpp);
    } else if (s.vpp != 1) {
        return REFUSE(ctx, "vpp=%d needs schedule=interleaved (got schedule=%s)", s.vpp,
                      schedule_names[s.schedule]);
    }
    DSI_TRY(check_stages(ctx, &s));
    if (s.gbs == 0)
        s.gbs = info->global_batch;
    /* Beyond this, activation sizes in bytes approach int64's range. */
    const int64_t max_tokens = INT64_C(1) << 32;
    if ((int64_t)s.mbs * info->seq_len > max_tokens)
        return REFUSE(
            ctx,
            "mbs=%d x sequence length %d = %lld tokens per micro-batch (accepted: at most %lld)",
            s.mbs, info->seq_len, (long long)s.mbs * info->seq_len, (long long)max_tokens);
    int64_t per_step = (int64_t)s.dp * s.mbs;
    /* interleaving also needs the micro-batches in groups of pp (below) */
    int64_t gbs_step = per_step * (s.schedule == DS_SCHEDULE_INTERLEAVED ? s.pp : 1);
    if (s.gbs % per_step != 0)
        return REFUSE(
            ctx,
            "gbs=%lld is not a multiple of dp*mbs = %d*%d = %lld (accepted: multiples of %lld)",
            (long long)s.gbs, s.dp, s.mbs, (long long)per_step, (long long)gbs_step);
    int64_t m = s.gbs / per_step;
    int64_t max_m = dsi_param_int(DSI_PARAM_MAX_MICROBATCHES);
    if (m > max_m)
        return REFUSE(
            ctx,
            "gbs=%lld is %lld micro-batches of dp*mbs = %d*%d per iteration (accepted: at most "
            "%lld, DS_MAX_MICROBATCHES; a larger mbs or dp, or a smaller global batch)",
            (long long)s.gbs, (long long)m, s.dp, s.mbs, (long long)max_m);
    if (s.schedule == DS_SCHEDULE_INTERLEAVED && m % s.pp != 0)
        return REFUSE(ctx,
                      "schedule=interleaved needs the %lld micro-batches to be a multiple of pp=%d "
                      "(Megatron's micro-batch group)",
                      (long long)m, s.pp);
    if (s.zero >= 2 && s.pp > 1)
        return REFUSE(
            ctx, "zero=%d cannot be combined with pp=%d (accepted: zero 0 or 1 with pipelining)",
            s.zero, s.pp);
    if (s.dp_algo == DS_DP_PS) {
        if (s.ps_servers == 0)
            s.ps_servers = s.dp;
        if (s.ps_servers > s.dp)
            return REFUSE(ctx, "ps-servers=%d exceeds dp=%d (accepted: 1 to %d)", s.ps_servers,
                          s.dp, s.dp);
        if (s.zero != 0)
            return REFUSE(ctx, "dp-algo=ps cannot be combined with zero=%d (accepted: zero=0)",
                          s.zero);
    }
    if (!ctx->quiet && ctx->gpus_per_node > 0 && s.tp > ctx->gpus_per_node)
        DSI_WARN("tp=%d spans more than the %d devices of a node: tensor-parallel collectives will "
                 "cross the network",
                 s.tp, ctx->gpus_per_node);
    *resolved_p = s;
    return DS_OK;
}

ds_status_t ds_strategy_resolve(ds_strategy_t *strategy, const ds_model_t *model,
                                int64_t target_gpus, int gpus_per_node)
{
    const ds_strategy_t given = *strategy;
    const resolve_ctx_t ctx = {&given, model, target_gpus, gpus_per_node, false};
    return resolve(&ctx, strategy);
}

ds_status_t ds_strategy_check_device(const ds_strategy_t *s, const ds_device_spec_t *device)
{
    if (s->fp8 == DS_FP8_OFF || (unsigned)s->fp8 >= DSI_ARRAY_SIZE(fp8_names))
        return DS_OK;
    char what[32];
    snprintf(what, sizeof(what), "fp8=%s", fp8_names[s->fp8]);
    return ds_device_check_fp8(device, what);
}

int64_t ds_strategy_num_microbatches(const ds_strategy_t *s)
{
    int64_t per_step = (int64_t)s->dp * s->mbs;
    return per_step > 0 ? s->gbs / per_step : 0;
}

void ds_strategy_chunk_layers(const ds_strategy_t *s, int num_layers, int stage, int chunk,
                              int *first_p, int *count_p)
{
    if (s->embedding_in_split || s->loss_in_split) {
        /* Megatron-Core (get_transformer_layer_offset with account_for_*):
         * virtual stage v = c * pp + r holds per_chunk slots, the first
         * virtual stage's first slot being the embedding, the last one's last
         * slot the loss. */
        int embedding = s->embedding_in_split ? 1 : 0;
        int chunks = s->pp * s->vpp;
        int per_chunk = (num_layers + embedding + (s->loss_in_split ? 1 : 0)) / chunks;
        int v = chunk * s->pp + stage;
        *first_p = v == 0 ? 0 : v * per_chunk - embedding;
        *count_p =
            per_chunk - (v == 0 ? embedding : 0) - (v == chunks - 1 && s->loss_in_split ? 1 : 0);
        return;
    }
    if (s->first_stage_layers || s->last_stage_layers) {
        /* Megatron-Core (get_transformer_layer_offset): each stage's layers
         * split evenly over its vpp chunks; chunk c of every stage holds the
         * c-th of vpp rounds, each round the first stage's share, the middle
         * stages' and the last stage's in order. */
        int ends = (s->first_stage_layers ? 1 : 0) + (s->last_stage_layers ? 1 : 0);
        int middle_stages = s->pp - ends;
        int middle =
            middle_stages > 0
                ? (num_layers - s->first_stage_layers - s->last_stage_layers) / middle_stages
                : 0;
        int middle_chunk = middle / s->vpp;
        int first_chunk = (s->first_stage_layers ? s->first_stage_layers : middle) / s->vpp;
        int last_chunk = (s->last_stage_layers ? s->last_stage_layers : middle) / s->vpp;
        int round = first_chunk + (s->pp - 2) * middle_chunk + last_chunk;
        if (stage == 0) {
            *first_p = chunk * round;
            *count_p = first_chunk;
        } else {
            *first_p = chunk * round + first_chunk + (stage - 1) * middle_chunk;
            *count_p = stage == s->pp - 1 ? last_chunk : middle_chunk;
        }
        return;
    }
    /* Megatron: chunk c of pipeline rank r holds model chunk c * pp + r. */
    int chunks = s->pp * s->vpp;
    int per_chunk = num_layers / chunks;
    *first_p = (chunk * s->pp + stage) * per_chunk;
    *count_p = per_chunk;
}

int ds_strategy_stage_layers(const ds_strategy_t *s, int num_layers, int stage)
{
    int total = 0;
    for (int chunk = 0; chunk < s->vpp; chunk++) {
        int first, count;
        ds_strategy_chunk_layers(s, num_layers, stage, chunk, &first, &count);
        total += count;
    }
    return total;
}

/* ---- placement ---------------------------------------------------------------- */

/* cp sits just inside dp (Megatron-Core's tp-cp-dp-pp): the dp dimension
 * holds dp * cp positions, so strategies with cp = 1 keep their ranks. */
static int cp_size(const ds_strategy_t *s)
{
    return s->cp > 1 ? s->cp : 1;
}

static int64_t dim_size(const ds_strategy_t *s, ds_dim_t dim)
{
    return dim == DS_DIM_TP ? s->tp : dim == DS_DIM_DP ? (int64_t)s->dp * cp_size(s) : s->pp;
}

static int64_t coord_get(ds_coords_t c, ds_dim_t dim)
{
    return dim == DS_DIM_TP ? c.tp : dim == DS_DIM_DP ? c.dp : c.pp;
}

int ds_strategy_cp_rank(const ds_strategy_t *s, ds_coords_t coords)
{
    return coords.dp % cp_size(s);
}

int ds_strategy_dp_replica(const ds_strategy_t *s, ds_coords_t coords)
{
    return coords.dp / cp_size(s);
}

int64_t ds_strategy_rank_of(const ds_strategy_t *s, ds_coords_t coords)
{
    int64_t rank = 0;
    for (int i = 2; i >= 0; i--)
        rank = rank * dim_size(s, s->order[i]) + coord_get(coords, s->order[i]);
    return rank;
}

ds_coords_t ds_strategy_coords_of(const ds_strategy_t *s, int64_t rank)
{
    ds_coords_t c = {0, 0, 0};
    for (int i = 0; i < 3; i++) {
        int64_t size = dim_size(s, s->order[i]);
        int64_t value = rank % size;
        rank /= size;
        if (s->order[i] == DS_DIM_TP) {
            c.tp = (int)value;
        } else if (s->order[i] == DS_DIM_DP) {
            c.dp = (int)value;
        } else {
            c.pp = (int)value;
        }
    }
    return c;
}
