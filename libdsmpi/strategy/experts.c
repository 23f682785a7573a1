/* The mixture-of-experts part of a strategy: ep, etp, the token dispatcher,
 * top-k, router skew and capacity, as Megatron-Core names and checks them. */
#include "dsi_strategy_moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEGREE (1 << 20)
#define MAX_SKEW 64.0

static const char *const dispatcher_names[] = {"alltoall", "allgather"};

static ds_status_t parse_ratio(const char *value, const char *key, double min, double max,
                               double *value_p)
{
    char *end = NULL;
    double x = value != NULL ? strtod(value, &end) : NAN;
    if (value == NULL || end == value || *end != '\0' || !(x >= min && x <= max))
        return DSI_ERROR(DS_ERR_INVALID_ARG, "%s '%s' is not accepted (accepted: %g to %g)", key,
                         value != NULL ? value : "", min, max);
    *value_p = x;
    return DS_OK;
}

ds_status_t dsi_strategy_apply_moe(ds_strategy_t *s, const char *key, const char *value,
                                   bool *handled_p)
{
    *handled_p = true;
    int index = 0;
    if (strcmp(key, "etp") == 0)
        return dsi_parse_int(value, "etp", 1, MAX_DEGREE, &s->etp);
    if (strcmp(key, "moe-topk") == 0)
        return dsi_parse_int(value, "moe-topk", 1, 4096, &s->moe_topk);
    if (strcmp(key, "moe-dispatcher") == 0) {
        DSI_TRY(dsi_parse_choice(value, "moe-dispatcher", dispatcher_names,
                                 DSI_ARRAY_SIZE(dispatcher_names), &index));
        s->moe_dispatcher = (ds_moe_dispatcher_t)index;
        return DS_OK;
    }
    if (strcmp(key, "router-skew") == 0)
        return parse_ratio(value, "router-skew", 1.0, MAX_SKEW, &s->router_skew);
    if (strcmp(key, "moe-capacity") == 0)
        return parse_ratio(value, "moe-capacity", 1.0, MAX_SKEW, &s->moe_capacity);
    *handled_p = false;
    return DS_OK;
}

void dsi_strategy_format_moe(const ds_strategy_t *s, dsi_strbuf_t *buf)
{
    if (s->ep > 1)
        dsi_strbuf_appendf(buf, ",ep=%d", s->ep);
    if (s->etp > 0 && s->etp != s->tp)
        dsi_strbuf_appendf(buf, ",etp=%d", s->etp);
    if (s->moe_dispatcher != DS_MOE_DISPATCH_ALLTOALL)
        dsi_strbuf_appendf(buf, ",moe-dispatcher=%s", dispatcher_names[s->moe_dispatcher]);
    if (s->moe_topk > 0)
        dsi_strbuf_appendf(buf, ",moe-topk=%d", s->moe_topk);
    if (s->router_skew > 0)
        dsi_strbuf_appendf(buf, ",router-skew=%.17g", s->router_skew);
    if (s->moe_capacity > 0)
        dsi_strbuf_appendf(buf, ",moe-capacity=%.17g", s->moe_capacity);
}

ds_status_t dsi_strategy_megatron_moe(const char *option, const char *value, const char **key_p,
                                      bool *handled_p)
{
    static const struct {
        const char *megatron, *key;
    } options[] = {
        {"expert-tensor-parallel-size", "etp"},
        {"moe-token-dispatcher-type", "moe-dispatcher"},
        {"moe-router-topk", "moe-topk"},
        {"moe-expert-capacity-factor", "moe-capacity"},
    };
    *handled_p = true;
    for (size_t i = 0; i < DSI_ARRAY_SIZE(options); i++) {
        if (strcmp(option, options[i].megatron) != 0)
            continue;
        if (value == NULL)
            return DSI_ERROR(DS_ERR_INVALID_ARG, "--%s needs a value", option);
        *key_p = options[i].key;
        return DS_OK;
    }
    /* Same work whatever they say: the experts run as grouped GEMMs, the
     * auxiliary loss is one small event. */
    if (strcmp(option, "moe-grouped-gemm") == 0) {
        *key_p = NULL;
        return DS_OK;
    }
    if (strcmp(option, "moe-router-load-balancing-type") == 0) {
        static const char *const types[] = {"aux_loss", "seq_aux_loss", "sinkhorn", "none"};
        int index;
        *key_p = NULL;
        return dsi_parse_choice(value, option, types, DSI_ARRAY_SIZE(types), &index);
    }
    *handled_p = false;
    return DS_ERR_INVALID_ARG;
}

#define REFUSE(quiet, ...)                                                                         \
    ((quiet) ? DS_ERR_INVALID_ARG : DSI_ERROR(DS_ERR_INVALID_ARG, __VA_ARGS__))

/* The ranks of one stage the expert groups are carved from: tp x cp x dp
 * (Megatron-Core forms EP and expert-DP out of them, cp included). */
static int64_t dense_ranks(const ds_strategy_t *s)
{
    return (int64_t)s->dp * (s->cp > 1 ? s->cp : 1) * s->tp;
}

/* Divisors of the experts with which ep x etp divides tp x cp x dp. */
static void accepted_ep(const ds_strategy_t *s, const ds_model_info_t *info, int etp, char *text,
                        size_t size)
{
    size_t used = 0;
    text[0] = '\0';
    for (int ep = 1; ep <= info->num_experts && used + 16 < size; ep++) {
        if (info->num_experts % ep != 0 || dense_ranks(s) % ((int64_t)ep * etp) != 0)
            continue;
        used += (size_t)snprintf(text + used, size - used, "%s%d", used ? ", " : "", ep);
    }
}

ds_status_t dsi_strategy_check_moe(ds_strategy_t *s, const ds_model_info_t *info, bool quiet)
{
    if (info->num_experts == 0) {
        if (s->ep != 1)
            return REFUSE(quiet,
                          "ep=%d needs a mixture-of-experts model (%s has no experts; "
                          "accepted: ep=1)",
                          s->ep, info->name);
        if (s->etp > 0 && s->etp != s->tp)
            return REFUSE(quiet,
                          "etp=%d needs a mixture-of-experts model (%s has no experts; "
                          "accepted: leave etp out)",
                          s->etp, info->name);
        if (s->moe_topk > 0)
            return REFUSE(quiet,
                          "moe-topk=%d needs a mixture-of-experts model (%s has no "
                          "experts)",
                          s->moe_topk, info->name);
        return DS_OK;
    }
    int etp = s->etp > 0 ? s->etp : s->tp;
    if (etp != 1 && etp != s->tp)
        return REFUSE(quiet,
                      "etp=%d is not modelled with tp=%d (accepted: etp=1, or etp=tp: the expert "
                      "layers split as the dense ones)",
                      etp, s->tp);
    char accepted[128];
    if (info->num_experts % s->ep != 0 || dense_ranks(s) % ((int64_t)s->ep * etp) != 0) {
        if (quiet)
            return DS_ERR_INVALID_ARG;
        accepted_ep(s, info, etp, accepted, sizeof(accepted));
        if (info->num_experts % s->ep != 0)
            return DSI_ERROR(DS_ERR_INVALID_ARG,
                             "ep=%d does not divide the %d experts of %s (accepted: %s)", s->ep,
                             info->num_experts, info->name, accepted);
        if (s->cp > 1)
            return DSI_ERROR(DS_ERR_INVALID_ARG,
                             "ep*etp = %d*%d does not divide dp*cp*tp = %d*%d*%d (Megatron-Core "
                             "carves the expert-parallel group out of the data- and "
                             "context-parallel ranks; accepted: ep=%s)",
                             s->ep, etp, s->dp, s->cp, s->tp, accepted);
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "ep*etp = %d*%d does not divide dp*tp = %d*%d (Megatron-Core carves the "
                         "expert-parallel group out of the data-parallel ranks; accepted: ep=%s)",
                         s->ep, etp, s->dp, s->tp, accepted);
    }
    if (info->moe_ffn_hidden_size % etp != 0)
        return REFUSE(quiet,
                      "etp=%d does not divide the expert MLP's %d columns (accepted: a "
                      "divisor of %d)",
                      etp, info->moe_ffn_hidden_size, info->moe_ffn_hidden_size);
    if (info->shared_ffn_hidden_size % s->tp != 0)
        return REFUSE(quiet, "tp=%d does not divide the shared experts' %d columns", s->tp,
                      info->shared_ffn_hidden_size);
    if (s->moe_topk > info->num_experts)
        return REFUSE(quiet, "moe-topk=%d exceeds the %d experts of %s (accepted: 1 to %d)",
                      s->moe_topk, info->num_experts, info->name, info->num_experts);
    if (s->tp > 1 && !s->sp)
        return REFUSE(quiet,
                      "tp=%d with experts needs sp (Megatron-Core requires sequence parallelism "
                      "for MoE with tp > 1; accepted: add sp)",
                      s->tp);
    s->etp = etp;
    return DS_OK;
}
