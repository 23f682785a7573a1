/*
 * The strategy space: fixes from strategy-grammar items, and every
 * combination of the enumerated dimensions in candidate order (search.h
 * says which values each dimension takes).
 */
#include "dsi_search.h"

#include <string.h>

static const char *const dim_keys[DSI_FIX_COUNT_] = {
    "tp",   "pp",      "dp",    "mbs", "schedule", "vpp", "sp", "recompute",
    "zero", "dp-algo", "flash", "fp8", "cp",       "ep",  "etp"};

static ds_status_t add_fixed(dsi_fixed_t *f, const char *key, int value)
{
    for (int i = 0; i < f->count; i++)
        if (f->values[i] == value)
            return DS_OK;
    if (f->count == DSI_SEARCH_MAX_FIXED)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "more than %d values fixed for %s (accepted: at most %d)",
                         DSI_SEARCH_MAX_FIXED, key, DSI_SEARCH_MAX_FIXED);
    f->values[f->count++] = value;
    return DS_OK;
}

static bool allows(const dsi_fixed_t *f, int value)
{
    if (f->count == 0)
        return true;
    for (int i = 0; i < f->count; i++)
        if (f->values[i] == value)
            return true;
    return false;
}

ds_status_t dsi_search_fix_item(ds_search_t *search, const char *item)
{
    char key[64];
    size_t len = strcspn(item, "=");
    if (len == 0 || len >= sizeof(key))
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "fix '%s' is not a strategy item (accepted: key=value, e.g. tp=4, "
                         "schedule=1f1b, or a flag such as no-sp)",
                         item);
    memcpy(key, item, len);
    key[len] = '\0';
    /* The value is checked by the strategy grammar itself. */
    ds_strategy_t parsed;
    ds_strategy_init(&parsed);
    DSI_TRY(ds_strategy_parse(item, &parsed));
    bool flag = item[len] == '\0';
    if (flag && (strcmp(key, "sp") == 0 || strcmp(key, "no-sp") == 0))
        return add_fixed(&search->fixed[DSI_FIX_SP], "sp", parsed.sp);
    if (flag && strcmp(key, "flash") == 0)
        return add_fixed(&search->fixed[DSI_FIX_FLASH], "flash", 1);
    for (int d = 0; d < DSI_FIX_COUNT_ && !flag; d++) {
        if (strcmp(key, dim_keys[d]) != 0)
            continue;
        int value = 0;
        switch ((dsi_dim_id_t)d) {
        case DSI_FIX_TP: value = parsed.tp; break;
        case DSI_FIX_PP: value = parsed.pp; break;
        case DSI_FIX_DP: value = parsed.dp; break;
        case DSI_FIX_MBS: value = parsed.mbs; break;
        case DSI_FIX_SCHEDULE: value = (int)parsed.schedule; break;
        case DSI_FIX_VPP: value = parsed.vpp; break;
        case DSI_FIX_SP: value = parsed.sp; break;
        case DSI_FIX_RECOMPUTE: value = (int)parsed.recompute; break;
        case DSI_FIX_ZERO: value = parsed.zero; break;
        case DSI_FIX_DP_ALGO: value = (int)parsed.dp_algo; break;
        case DSI_FIX_FLASH: value = parsed.flash_attention; break;
        case DSI_FIX_FP8:
            value = (int)parsed.fp8;
            DSI_TRY(ds_strategy_check_device(&parsed, &search->cluster.device));
            break;
        case DSI_FIX_CP: value = parsed.cp; break;
        case DSI_FIX_EP: value = parsed.ep; break;
        case DSI_FIX_ETP: value = parsed.etp; break;
        case DSI_FIX_COUNT_: break;
        }
        return add_fixed(&search->fixed[d], dim_keys[d], value);
    }
    /* Not enumerated: a field of every candidate. */
    return ds_strategy_parse(item, &search->base);
}

/* Values of one dimension: the fixed ones, else `defaults`. */
typedef struct values {
    int count;
    int v[64];
} values_t;

static void from_fixed_or(values_t *out, const dsi_fixed_t *f, const int *defaults, int count)
{
    out->count = 0;
    if (f->count > 0) {
        for (int i = 0; i < f->count; i++)
            out->v[out->count++] = f->values[i];
        return;
    }
    for (int i = 0; i < count && out->count < (int)DSI_ARRAY_SIZE(out->v); i++)
        out->v[out->count++] = defaults[i];
}

/* A dimension that has no effect here (sp with tp = 1, zero and dp-algo
 * with dp = 1) keeps one value: the default when allowed, else the first
 * fixed one (sp: none, it needs tp > 1). */
static void keep_one(values_t *vals, int preferred)
{
    if (vals->count <= 1)
        return;
    for (int i = 0; i < vals->count; i++)
        if (vals->v[i] == preferred) {
            vals->v[0] = preferred;
            vals->count = 1;
            return;
        }
    vals->count = 1;
}

typedef struct sched_option {
    ds_schedule_t schedule;
    int vpp;
} sched_option_t;

static int schedule_options(const ds_search_t *search, int pp, sched_option_t *out)
{
    const dsi_fixed_t *fs = &search->fixed[DSI_FIX_SCHEDULE], *fv = &search->fixed[DSI_FIX_VPP];
    int n = 0;
    bool flat = allows(fv, 1);
    if (pp == 1) {
        /* No pipeline: one schedule (1f1b unless only gpipe is allowed). */
        if (flat && allows(fs, DS_SCHEDULE_1F1B))
            out[n++] = (sched_option_t){DS_SCHEDULE_1F1B, 1};
        else if (flat && allows(fs, DS_SCHEDULE_GPIPE))
            out[n++] = (sched_option_t){DS_SCHEDULE_GPIPE, 1};
        return n;
    }
    if (flat && allows(fs, DS_SCHEDULE_GPIPE))
        out[n++] = (sched_option_t){DS_SCHEDULE_GPIPE, 1};
    if (flat && allows(fs, DS_SCHEDULE_1F1B))
        out[n++] = (sched_option_t){DS_SCHEDULE_1F1B, 1};
    if (allows(fs, DS_SCHEDULE_INTERLEAVED)) {
        if (fv->count > 0) {
            for (int i = 0; i < fv->count && n < 16; i++)
                if (fv->values[i] > 1)
                    out[n++] = (sched_option_t){DS_SCHEDULE_INTERLEAVED, fv->values[i]};
        } else {
            out[n++] = (sched_option_t){DS_SCHEDULE_INTERLEAVED, 2};
            out[n++] = (sched_option_t){DS_SCHEDULE_INTERLEAVED, 4};
        }
    }
    return n;
}

/* Context-parallel degrees for a (tp, pp) with `per_replica` = N / (tp pp)
 * devices left: the fixed ones, else 1 and, for sequences of at least
 * DS_SEARCH_CP_MIN_SEQ tokens, the powers of two that split the sequence
 * into 2 cp equal chunks (times tp with sp: checked by resolve) and leave
 * a whole dp.  cp needs fused attention (strategy.h): only candidates
 * with flash take cp > 1. */
static void cp_options(const ds_search_t *search, const ds_model_info_t *info, int64_t per_replica,
                       values_t *out)
{
    const dsi_fixed_t *f = &search->fixed[DSI_FIX_CP];
    out->count = 0;
    if (f->count > 0) {
        for (int i = 0; i < f->count; i++)
            if (per_replica % f->values[i] == 0)
                out->v[out->count++] = f->values[i];
        return;
    }
    out->v[out->count++] = 1;
    if (info->seq_len < dsi_param_int(DSI_PARAM_SEARCH_CP_MIN_SEQ))
        return;
    for (int64_t cp = 2; cp <= per_replica && out->count < (int)DSI_ARRAY_SIZE(out->v); cp *= 2)
        if (per_replica % cp == 0 && info->seq_len % (2 * cp) == 0)
            out->v[out->count++] = (int)cp;
}

/* A pipeline's layers per end stage (0: as many as a middle stage). */
typedef struct stage_layout {
    int first, last;
} stage_layout_t;

/* Layouts of L layers on pp stages of vpp chunks each: the base strategy's
 * when it gives first-stage-layers, last-stage-layers, embedding-in-split or
 * loss-in-split; the even split
 * where pp x vpp divides L; else Megatron-Core's uneven ends
 * (--decoder-first/last-pipeline-num-layers): every middle stage takes m
 * layers, the fewest with which the two ends can hold the rest (ceil(L / pp)
 * rounded up to a multiple of vpp), and the ends every split of the
 * L - (pp - 2) m left with each end holding vpp to m layers in multiples of
 * vpp.  Those are the layouts whose slowest stage has the fewest layers.
 * Where none exists the even split is returned, for resolve to refuse with
 * its reason. */
static int stage_layouts(const ds_strategy_t *base, int L, int pp, int vpp, stage_layout_t *out,
                         int max)
{
    if (base->first_stage_layers || base->last_stage_layers || base->embedding_in_split ||
        base->loss_in_split || L % (pp * vpp) == 0 || pp < 2) {
        out[0] = (stage_layout_t){base->first_stage_layers, base->last_stage_layers};
        return 1;
    }
    int m = (L + pp - 1) / pp;
    m = (m + vpp - 1) / vpp * vpp;
    int rest = L - (pp - 2) * m, n = 0;
    for (int first = vpp; first <= m && n < max; first += vpp) {
        int last = rest - first;
        if (last >= vpp && last <= m && last % vpp == 0)
            out[n++] = (stage_layout_t){first == m ? 0 : first, last == m ? 0 : last};
    }
    if (n == 0)
        out[n++] = (stage_layout_t){0, 0};
    return n;
}

/* One combination of the dimensions enumerated inside (tp, pp, mbs, schedule). */
typedef struct variant {
    int sp, recompute, zero, dp_algo, flash, fp8, ep, etp;
} variant_t;

/* The experts' layout of an MoE model: expert-tensor parallelism etp = tp
 * and, with tp > 1, etp = 1 (the two Megatron-Core layouts modelled; the
 * base strategy's etp when it gives one); for each, expert parallelism ep
 * over the divisors of the experts with which ep x etp divides dp x tp, dp
 * counting the context-parallel ranks too (Megatron-Core's EP out of DP x
 * CP).  A dense model: ep = 1 with the base's etp.  Returns the count. */
static int expert_layouts(const ds_search_t *search, const ds_model_info_t *info, int tp, int dp,
                          int *eps, int *etps, int max)
{
    int etp_defaults[2] = {search->base.etp > 0 ? search->base.etp : tp, 1};
    int num_etp_defaults = info->num_experts > 1 && search->base.etp == 0 && tp > 1 ? 2 : 1;
    values_t etp_values;
    from_fixed_or(&etp_values, &search->fixed[DSI_FIX_ETP], etp_defaults, num_etp_defaults);
    int n = 0;
    for (int ti = 0; ti < etp_values.count; ti++) {
        int etp = etp_values.v[ti];
        int defaults[64], nd = 0;
        for (int ep = 1; ep <= DSI_MAX(info->num_experts, 1) && nd < 64; ep++)
            if (ep == 1 ||
                (info->num_experts % ep == 0 && ((int64_t)dp * tp) % ((int64_t)ep * etp) == 0))
                defaults[nd++] = ep;
        values_t ep_values;
        from_fixed_or(&ep_values, &search->fixed[DSI_FIX_EP], defaults, nd);
        /* etp = tp is written as the base's etp (0 unless given), so that
         * dense and default candidates read as before */
        int written = etp == tp && search->base.etp == 0 ? 0 : etp;
        for (int i = 0; i < ep_values.count && n < max; i++) {
            eps[n] = ep_values.v[i];
            etps[n++] = written;
        }
    }
    return n;
}

/* Every candidate of one (tp, pp, cp): micro-batch sizes, schedules and the
 * inner dimensions' combinations (*variants_p: scratch kept across calls). */
static ds_status_t visit_tp_pp_cp(ds_search_t *search, const ds_model_info_t *info, int tp, int pp,
                                  int cp, const values_t *mbss, const values_t *sps,
                                  const values_t *recs, const values_t *flashes,
                                  const values_t *fp8s, variant_t **variants_p,
                                  dsi_search_visit_t visit, void *arg)
{
    static const int zero_values[] = {0, 1, 2, 3};
    static const int algo_values[] = {DS_DP_AUTO, DS_DP_RING, DS_DP_TREE, DS_DP_HIERARCHICAL,
                                      DS_DP_PS};
    const dsi_fixed_t *fx = search->fixed;
    int64_t N = ds_cluster_num_gpus(&search->cluster);
    int64_t mp = (int64_t)tp * pp * cp;
    int dp = N % mp == 0 ? (int)(N / mp) : 0; /* 0: resolve rejects it */
    if (fx[DSI_FIX_DP].count > 0 && !allows(&fx[DSI_FIX_DP], dp))
        return DS_OK;
    values_t zeros, algos;
    int eps[128], etps[128];
    sched_option_t sched[20];
    int num_sched = schedule_options(search, pp, sched);
    from_fixed_or(&zeros, &fx[DSI_FIX_ZERO], zero_values, 4);
    from_fixed_or(&algos, &fx[DSI_FIX_DP_ALGO], algo_values, 5);
    if ((int64_t)dp * cp == 1) { /* gradients reduce over dp x cp */
        keep_one(&zeros, 0);
        keep_one(&algos, DS_DP_AUTO);
    }
    /* EP is carved from tp x cp x dp */
    int num_experts = expert_layouts(search, info, tp, dp * cp, eps, etps, 128);
    /* The remaining dimensions' combinations, innermost last. */
    size_t nv = 0, want = (size_t)sps->count * recs->count * zeros.count * algos.count *
                          flashes->count * fp8s->count * (size_t)num_experts;
    dsi_free(*variants_p);
    *variants_p = NULL;
    DSI_TRY(dsi_calloc(want ? want : 1, sizeof(**variants_p), variants_p));
    variant_t *variants = *variants_p;
    /* The DP algorithm innermost: it changes neither validity nor memory
     * but with a parameter server, so the visitor can keep them from the
     * combination before (search.c). */
    for (int qi = 0; qi < sps->count; qi++)
        for (int ri = 0; ri < recs->count; ri++)
            for (int zi = 0; zi < zeros.count; zi++)
                for (int fi = 0; fi < flashes->count; fi++)
                    for (int ei = 0; ei < fp8s->count; ei++)
                        for (int xi = 0; xi < num_experts; xi++)
                            for (int ai = 0; ai < algos.count; ai++)
                                /* cp needs fused attention */
                                if (cp == 1 || flashes->v[fi])
                                    variants[nv++] = (variant_t){
                                        sps->v[qi],     recs->v[ri], zeros.v[zi], algos.v[ai],
                                        flashes->v[fi], fp8s->v[ei], eps[xi],     etps[xi]};
    stage_layout_t layouts[64];
    for (int bi = 0; bi < mbss->count; bi++)
        for (int si = 0; si < num_sched; si++) {
            int num_layouts = stage_layouts(&search->base, DSI_MAX(info->num_layers, 1), pp,
                                            sched[si].vpp, layouts, (int)DSI_ARRAY_SIZE(layouts));
            for (int li = 0; li < num_layouts; li++)
                for (size_t vi = 0; vi < nv; vi++) {
                    const variant_t *v = &variants[vi];
                    ds_strategy_t s = search->base;
                    s.tp = tp;
                    s.pp = pp;
                    s.cp = cp;
                    s.dp = dp;
                    s.mbs = mbss->v[bi];
                    s.schedule = sched[si].schedule;
                    s.vpp = sched[si].vpp;
                    s.layers_per_virtual_stage = 0;
                    s.first_stage_layers = layouts[li].first;
                    s.last_stage_layers = layouts[li].last;
                    s.sp = v->sp;
                    s.recompute = (ds_recompute_t)v->recompute;
                    s.zero = v->zero;
                    s.dp_algo = (ds_dp_algo_t)v->dp_algo;
                    s.flash_attention = v->flash;
                    s.fp8 = (ds_fp8_t)v->fp8;
                    s.ep = v->ep;
                    s.etp = v->etp;
                    DSI_TRY(visit(search, &s, arg));
                }
        }
    return DS_OK;
}

ds_status_t dsi_search_each_combination(ds_search_t *search, dsi_search_visit_t visit, void *arg)
{
    ds_model_info_t info;
    ds_model_get_info(search->model, &info);
    int64_t N = ds_cluster_num_gpus(&search->cluster);
    int L = info.num_layers > 0 ? info.num_layers : 1;
    int max_tp = search->opt.max_tp > 0 ? search->opt.max_tp : search->cluster.gpus_per_node;
    int max_mbs = search->opt.max_mbs > 0 ? search->opt.max_mbs
                                          : (int)dsi_param_int(DSI_PARAM_SEARCH_MAX_MBS);
    const dsi_fixed_t *fx = search->fixed;

    values_t tps, mbss, sps, recs, flashes, fp8s, cps;
    variant_t *variants = NULL;
    ds_status_t status = DS_OK;
    int defaults[64] = {0};
    int n = 0;
    for (int t = 1; t <= max_tp && n < 64; t++)
        if (N % t == 0)
            defaults[n++] = t;
    from_fixed_or(&tps, &fx[DSI_FIX_TP], defaults, n);
    n = 0;
    for (int b = 1; b <= max_mbs && n < 64; b *= 2)
        defaults[n++] = b;
    from_fixed_or(&mbss, &fx[DSI_FIX_MBS], defaults, n);
    static const int sp_values[] = {0, 1};
    static const int rec_values[] = {DS_RECOMPUTE_NONE, DS_RECOMPUTE_SELECTIVE, DS_RECOMPUTE_FULL};
    from_fixed_or(&recs, &fx[DSI_FIX_RECOMPUTE], rec_values, 3);
    /* Fused attention and fp8: both off and on where the device model
     * prices what was not measured (estimate_missing) and the base strategy
     * leaves them off, fp8 only on a device with fp8 tensor cores (the CPU
     * backend computes fp8 as bf16: nothing to gain); else the base's, as
     * measured costs must hold their keys.  --fix gives several either way. */
    const int flash_values[2] = {search->base.flash_attention, 1};
    const int fp8_values[2] = {(int)search->base.fp8, DS_FP8_HYBRID};
    bool kernels = search->opt.estimate_missing != 0;
    bool fp8_device = strcmp(search->cluster.device.name, "cpu") != 0 &&
                      ds_device_check_fp8(&search->cluster.device, "fp8") == DS_OK;
    from_fixed_or(&flashes, &fx[DSI_FIX_FLASH], flash_values,
                  kernels && !search->base.flash_attention ? 2 : 1);
    from_fixed_or(&fp8s, &fx[DSI_FIX_FP8], fp8_values,
                  kernels && fp8_device && search->base.fp8 == DS_FP8_OFF ? 2 : 1);

    for (int ti = 0; ti < tps.count; ti++) {
        int tp = tps.v[ti];
        values_t pps;
        n = 0;
        for (int p = 1; p <= L && n < 64; p++)
            if (N % ((int64_t)tp * p) == 0)
                defaults[n++] = p;
        from_fixed_or(&pps, &fx[DSI_FIX_PP], defaults, n);
        from_fixed_or(&sps, &fx[DSI_FIX_SP], sp_values, 2);
        if (tp == 1) {
            /* Sequence parallelism needs tp > 1. */
            int kept = 0;
            for (int i = 0; i < sps.count; i++)
                if (sps.v[i] == 0)
                    kept = 1;
            sps.count = kept;
            sps.v[0] = 0;
        }
        for (int pi = 0; pi < pps.count; pi++) {
            int pp = pps.v[pi];
            cp_options(search, &info, N % ((int64_t)tp * pp) == 0 ? N / ((int64_t)tp * pp) : 1,
                       &cps);
            for (int ci = 0; ci < cps.count; ci++) {
                DSI_TRY_GOTO(visit_tp_pp_cp(search, &info, tp, pp, cps.v[ci], &mbss, &sps, &recs,
                                            &flashes, &fp8s, &variants, visit, arg),
                             status, out);
            }
        }
    }
out:
    dsi_free(variants);
    return status;
}
