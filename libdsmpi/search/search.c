/*
 * The strategy search: enumeration with the memory filter, lower bounds,
 * branch and bound over the candidates in bound order, distribution over MPI
 * ranks and the deterministic merge on rank 0.
 */
#include "dsi_search.h"

#include "dsi_mpi.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

void ds_search_options_init(ds_search_options_t *options)
{
    memset(options, 0, sizeof(*options));
    options->top_k = (int)dsi_param_int(DSI_PARAM_SEARCH_TOP_K);
    options->granularity = DS_SIM_STAGE;
    options->bound = 1;
}

ds_status_t ds_search_create(const ds_model_t *model, const ds_cluster_t *cluster,
                             const ds_strategy_t *base, const ds_search_options_t *options,
                             ds_search_t **search_p)
{
    if (model == NULL || cluster == NULL || search_p == NULL)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "search needs a model, a cluster and an output pointer");
    ds_search_options_t opt;
    if (options == NULL)
        ds_search_options_init(&opt);
    else
        opt = *options;
    if (opt.top_k < 1 || opt.top_k > 100000)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "top %d (accepted: 1 to 100000)", opt.top_k);
    if (opt.max_tp < 0 || opt.max_tp > (1 << 20))
        return DSI_ERROR(DS_ERR_INVALID_ARG, "max-tp %d (accepted: 1 to %d)", opt.max_tp, 1 << 20);
    if (opt.max_mbs < 0 || opt.max_mbs > (1 << 24))
        return DSI_ERROR(DS_ERR_INVALID_ARG, "max-mbs %d (accepted: 1 to %d)", opt.max_mbs,
                         1 << 24);
    if (opt.granularity != DS_SIM_LAYER && opt.granularity != DS_SIM_STAGE)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "granularity %d (accepted: layer, stage)",
                         (int)opt.granularity);
    ds_search_t *search;
    DSI_TRY(dsi_calloc(1, sizeof(*search), &search));
    ds_status_t status = ds_sim_create(&search->sim);
    if (status != DS_OK) {
        dsi_free(search);
        return status;
    }
    search->model = model;
    search->cluster = *cluster;
    if (base != NULL)
        search->base = *base;
    else
        ds_strategy_init(&search->base);
    search->opt = opt;
    *search_p = search;
    return DS_OK;
}

void ds_search_destroy(ds_search_t *search)
{
    if (search == NULL)
        return;
    ds_sim_destroy(search->sim);
    dsi_free(search->cand);
    dsi_free(search->results);
    dsi_free(search);
}

ds_status_t ds_search_fix(ds_search_t *search, const char *text)
{
    if (text == NULL || *text == '\0')
        return DSI_ERROR(DS_ERR_INVALID_ARG, "fix is empty (accepted: key=value, e.g. tp=4)");
    if (strlen(text) >= 1024)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "fix of %zu characters is too long (accepted: at most 1023)",
                         strlen(text));
    char copy[1024];
    strcpy(copy, text);
    ds_search_t saved = *search; /* all items or none */
    for (char *save = NULL, *item = strtok_r(copy, ",", &save); item != NULL;
         item = strtok_r(NULL, ",", &save)) {
        ds_status_t status = dsi_search_fix_item(search, item);
        if (status != DS_OK) {
            *search = saved;
            return status;
        }
    }
    search->enumerated = 0;
    return DS_OK;
}

/* ---- enumeration ------------------------------------------------------------------------- */

static ds_status_t add_candidate(ds_search_t *search, const ds_strategy_t *s, double memory_GiB)
{
    if (search->num_cand == search->cap_cand) {
        size_t cap = search->cap_cand ? 2 * search->cap_cand : 256;
        DSI_TRY(dsi_realloc_array(&search->cand, cap, sizeof(*search->cand)));
        search->cap_cand = cap;
    }
    dsi_candidate_t *c = &search->cand[search->num_cand++];
    memset(c, 0, sizeof(*c));
    c->strategy = *s;
    c->memory_GiB = memory_GiB;
    return DS_OK;
}

/* The combination before, without its DP algorithm, and what came of it:
 * the algorithm changes neither validity nor memory (a parameter server
 * does), and the enumeration varies it innermost. */
typedef struct combination_memo {
    bool have;
    ds_strategy_t key; /* dp_algo auto */
    enum { MEMO_INVALID, MEMO_OUT_OF_MEMORY, MEMO_CANDIDATE } outcome;
    ds_strategy_t resolved;
    double memory_GiB;
} combination_memo_t;

static ds_status_t visit_combination(ds_search_t *search, const ds_strategy_t *combo, void *arg)
{
    combination_memo_t *memo = arg;
    ds_search_stats_t *st = &search->stats;
    st->enumerated++;
    ds_strategy_t s = *combo;
    bool memo_applies = combo->dp_algo != DS_DP_PS;
    if (memo_applies) {
        ds_strategy_t key = *combo;
        key.dp_algo = DS_DP_AUTO;
        if (memo->have && memcmp(&key, &memo->key, sizeof(key)) == 0) {
            if (memo->outcome == MEMO_INVALID) {
                st->invalid++;
                return DS_OK;
            }
            if (memo->outcome == MEMO_OUT_OF_MEMORY) {
                st->out_of_memory++;
                return DS_OK;
            }
            s = memo->resolved;
            s.dp_algo = combo->dp_algo;
            return add_candidate(search, &s, memo->memory_GiB);
        }
        memo->have = true;
        memo->key = key;
    }
    /* Devices per node 0: no warning per candidate for tp spanning nodes. */
    if (ds_strategy_resolve(&s, search->model, ds_cluster_num_gpus(&search->cluster), 0) != DS_OK ||
        ds_strategy_check_device(&s, &search->cluster.device) != DS_OK) {
        if (st->invalid++ == 0)
            snprintf(st->first_invalid, sizeof(st->first_invalid), "%s", ds_last_error());
        if (memo_applies)
            memo->outcome = MEMO_INVALID;
        return DS_OK;
    }
    ds_sim_options_t so;
    ds_sim_options_init(&so);
    ds_sim_estimate_t est;
    ds_status_t status =
        ds_sim_estimate(search->sim, search->model, &s, &search->cluster, NULL, &so, &est);
    if (status != DS_OK) {
        memo->have = false;
        return status;
    }
    double memory_GiB = est.memory.total_B / GIB;
    if (memo_applies) {
        memo->outcome = est.oom ? MEMO_OUT_OF_MEMORY : MEMO_CANDIDATE;
        memo->resolved = s;
        memo->memory_GiB = memory_GiB;
    }
    if (est.oom) {
        if (st->out_of_memory++ == 0 || memory_GiB < st->min_oom_GiB)
            st->min_oom_GiB = memory_GiB;
        return DS_OK;
    }
    return add_candidate(search, &s, memory_GiB);
}

ds_status_t ds_search_enumerate(ds_search_t *search)
{
    double t0 = dsi_now_s();
    memset(&search->stats, 0, sizeof(search->stats));
    search->num_cand = 0;
    search->num_results = 0;
    search->have_worst = 0;
    search->enumerated = 0;
    combination_memo_t memo;
    memset(&memo, 0, sizeof(memo));
    DSI_TRY(dsi_search_each_combination(search, visit_combination, &memo));
    search->stats.candidates = (int64_t)search->num_cand;
    search->stats.enumerate_s = dsi_now_s() - t0;
    search->enumerated = 1;
    return DS_OK;
}

size_t ds_search_candidate_count(const ds_search_t *search)
{
    return search->enumerated ? search->num_cand : 0;
}

const ds_strategy_t *ds_search_candidate_at(const ds_search_t *search, size_t index)
{
    return search->enumerated && index < search->num_cand ? &search->cand[index].strategy : NULL;
}

ds_status_t ds_search_events(const ds_search_t *search, ds_event_set_t **set_p)
{
    if (!search->enumerated)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "the space is not enumerated yet (call ds_search_enumerate first)");
    ds_event_set_t *all = NULL, *one = NULL;
    ds_status_t status = DS_OK;
    DSI_TRY(ds_event_set_create(&all));
    for (size_t i = 0; i < search->num_cand; i++) {
        DSI_TRY_GOTO(
            ds_events_generate(search->model, &search->cand[i].strategy, &search->cluster, &one),
            status, err_all);
        status = ds_event_set_merge(all, one);
        ds_event_set_destroy(one);
        one = NULL;
        if (status != DS_OK)
            goto err_all;
    }
    *set_p = all;
    return DS_OK;
err_all:
    ds_event_set_destroy(all);
    return status;
}

/* ---- ranks agree on failures ------------------------------------------------------------- */

typedef struct failure_msg {
    int status;
    char text[512];
} failure_msg_t;

/* Every rank returns the failure of the lowest failing rank (its message). */
static ds_status_t agree(MPI_Comm comm, int rank, ds_status_t status)
{
    if (comm == MPI_COMM_NULL)
        return status;
    ds_status_t mpi_status = DS_OK;
    int mine = status != DS_OK ? rank : INT_MAX, first = INT_MAX;
    DSI_MPI_TRY_GOTO(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm), mpi_status, out);
    if (first == INT_MAX)
        return DS_OK;
    failure_msg_t msg;
    memset(&msg, 0, sizeof(msg));
    if (rank == first) {
        msg.status = (int)status;
        snprintf(msg.text, sizeof(msg.text), "%s", ds_last_error());
    }
    DSI_MPI_TRY_GOTO(MPI_Bcast(&msg, (int)sizeof(msg), MPI_BYTE, first, comm), mpi_status, out);
    if (rank == first)
        return status;
    return DSI_ERROR((ds_status_t)msg.status, "%s", msg.text);
out:
    return mpi_status;
}

/* ---- evaluation -------------------------------------------------------------------------- */

typedef struct bound_entry {
    double lb;
    int64_t index;
} bound_entry_t;

static int by_bound(const void *x, const void *y)
{
    const bound_entry_t *a = x, *b = y;
    if (a->lb != b->lb)
        return a->lb < b->lb ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

/* The fields that change a simulation's costs but not its graph (the
 * simulator's reuse key, libdsmpi/sim/reuse.c) cleared. */
static ds_strategy_t graph_shape(const ds_strategy_t *s)
{
    ds_strategy_t shape;
    memcpy(&shape, s, sizeof(shape));
    shape.recompute = DS_RECOMPUTE_NONE;
    shape.flash_attention = 0;
    shape.fp8 = DS_FP8_OFF;
    shape.dp_algo = s->dp_algo == DS_DP_PS ? DS_DP_PS : DS_DP_AUTO;
    return shape;
}

typedef struct shape_entry {
    ds_strategy_t shape;
    bound_entry_t entry;
} shape_entry_t;

/* Where the groups sit first, so that runs of candidates share the
 * simulator's group layouts (its expert layouts are kept while they do). */
static int by_placement(const ds_strategy_t *a, const ds_strategy_t *b)
{
    const int x[] = {a->tp, a->dp, a->cp, a->pp, a->ep, a->etp};
    const int y[] = {b->tp, b->dp, b->cp, b->pp, b->ep, b->etp};
    for (size_t i = 0; i < DSI_ARRAY_SIZE(x); i++)
        if (x[i] != y[i])
            return x[i] < y[i] ? -1 : 1;
    return memcmp(a->order, b->order, sizeof(a->order));
}

static int by_shape(const void *x, const void *y)
{
    const shape_entry_t *a = x, *b = y;
    int c = by_placement(&a->shape, &b->shape);
    if (c == 0)
        c = memcmp(&a->shape, &b->shape, sizeof(a->shape));
    if (c != 0)
        return c;
    return (a->entry.index > b->entry.index) - (a->entry.index < b->entry.index);
}

/* Exhaustive search: candidates that differ in costs only one after the
 * other on one rank, each rank a contiguous run of them (it takes entries
 * rank, rank + size, ...), so that the simulator keeps their graph.  The
 * results do not depend on the order. */
static ds_status_t order_by_shape(const ds_search_t *search, bound_entry_t *order, size_t n,
                                  int size)
{
    shape_entry_t *sorted = NULL;
    DSI_TRY(dsi_calloc(n ? n : 1, sizeof(*sorted), &sorted));
    for (size_t i = 0; i < n; i++) {
        sorted[i].shape = graph_shape(&search->cand[order[i].index].strategy);
        sorted[i].entry = order[i];
    }
    qsort(sorted, n, sizeof(*sorted), by_shape);
    size_t next = 0;
    for (size_t r = 0; r < (size_t)size; r++)
        for (size_t j = r; j < n; j += (size_t)size)
            order[j] = sorted[next++].entry;
    dsi_free(sorted);
    return DS_OK;
}

/* Ranking order: time, then candidate index. */
static int better(const ds_search_result_t *a, const ds_search_result_t *b)
{
    if (a->iteration_s != b->iteration_s)
        return a->iteration_s < b->iteration_s;
    return a->candidate < b->candidate;
}

static int by_rank(const void *x, const void *y)
{
    const ds_search_result_t *a = x, *b = y;
    return better(a, b) ? -1 : better(b, a) ? 1 : 0;
}

/* ---- equivalent variants ----------------------------------------------------------------- */

/* Equal timelines (event for event, times in integer ns) and equal memory. */
static bool equivalent(const ds_search_result_t *a, const ds_search_result_t *b)
{
    return a->timeline_hash == b->timeline_hash && a->iteration_s == b->iteration_s &&
           a->memory_GiB == b->memory_GiB;
}

/* Counts candidate `index` among the variants of `r`, keeping the lowest
 * indices in order. */
static void add_variant(ds_search_result_t *r, int64_t index)
{
    int stored = DSI_MIN(r->num_variants, DS_SEARCH_MAX_VARIANTS);
    r->num_variants++;
    if (stored == DS_SEARCH_MAX_VARIANTS && index > r->variants[stored - 1])
        return;
    int i = stored < DS_SEARCH_MAX_VARIANTS ? stored : DS_SEARCH_MAX_VARIANTS - 1;
    while (i > 0 && r->variants[i - 1] > index) {
        r->variants[i] = r->variants[i - 1];
        i--;
    }
    r->variants[i] = index;
}

/* Joins the equivalent result `b` (and its variants) into `a`: the lower
 * candidate index stands for both. */
static void join_variants(ds_search_result_t *a, const ds_search_result_t *b)
{
    ds_search_result_t other = *b;
    if (b->candidate < a->candidate) {
        other = *a;
        *a = *b;
    }
    int stored = DSI_MIN(other.num_variants, DS_SEARCH_MAX_VARIANTS);
    add_variant(a, other.candidate);
    for (int i = 0; i < stored; i++)
        add_variant(a, other.variants[i]);
    a->num_variants += other.num_variants - stored;
}

/* Local state of one rank. */
typedef struct local {
    ds_search_result_t *top; /* sorted: the best k (all_variants), or the best k distinct
                                timelines and those tied in time with the k-th */
    int count, capacity, k;
    bool group; /* equivalent variants share a result */
    ds_search_result_t worst;
    int have_worst;
    int64_t simulated, bounded, failed;
    double sim_cpu_s;
    char first_error[256];
} local_t;

static double kth_best(const local_t *l)
{
    return l->count >= l->k ? l->top[l->k - 1].iteration_s : HUGE_VAL;
}

static ds_status_t local_add(local_t *l, const ds_search_result_t *r)
{
    if (!l->have_worst || better(&l->worst, r)) {
        l->worst = *r;
        l->have_worst = 1;
    }
    if (!l->group) {
        if (l->count == l->k && !better(r, &l->top[l->k - 1]))
            return DS_OK;
        int i = l->count < l->k ? l->count++ : l->k - 1;
        while (i > 0 && better(r, &l->top[i - 1])) {
            l->top[i] = l->top[i - 1];
            i--;
        }
        l->top[i] = *r;
        return DS_OK;
    }
    for (int i = 0; i < l->count; i++) {
        if (!equivalent(&l->top[i], r))
            continue;
        join_variants(&l->top[i], r);
        for (; i > 0 && better(&l->top[i], &l->top[i - 1]); i--) { /* its index may be lower now */
            ds_search_result_t t = l->top[i];
            l->top[i] = l->top[i - 1];
            l->top[i - 1] = t;
        }
        return DS_OK;
    }
    /* A result tied with the k-th is kept beside it: an equivalent of it
     * with a lower index may come later and must find it. */
    if (r->iteration_s > kth_best(l))
        return DS_OK;
    if (l->count == l->capacity) {
        int capacity = 2 * l->capacity + 8;
        DSI_TRY(dsi_realloc_array(&l->top, (size_t)capacity, sizeof(*l->top)));
        l->capacity = capacity;
    }
    int i = l->count++;
    while (i > 0 && better(r, &l->top[i - 1])) {
        l->top[i] = l->top[i - 1];
        i--;
    }
    l->top[i] = *r;
    double kth = kth_best(l);
    while (l->count > l->k && l->top[l->count - 1].iteration_s > kth)
        l->count--;
    return DS_OK;
}

static ds_status_t simulate(ds_search_t *search, int64_t index, const ds_cost_table_t *costs,
                            const ds_sim_options_t *so, local_t *l)
{
    const dsi_candidate_t *c = &search->cand[index];
    double t0 = dsi_now_s();
    ds_status_t status =
        ds_sim_run(search->sim, search->model, &c->strategy, &search->cluster, costs, so);
    l->sim_cpu_s += dsi_now_s() - t0;
    if (status == DS_ERR_NOT_FOUND || status == DS_ERR_NO_MEMORY)
        return status;
    if (status != DS_OK) {
        if (l->failed++ == 0) {
            char text[DS_STRATEGY_TEXT_MAX];
            ds_strategy_format(&c->strategy, text, sizeof(text));
            dsi_strbuf_t buf;
            dsi_strbuf_init(&buf);
            dsi_strbuf_appendf(&buf, "%s: %s", text, ds_last_error());
            snprintf(l->first_error, sizeof(l->first_error), "%s",
                     dsi_strbuf_status(&buf) == DS_OK ? dsi_strbuf_text(&buf) : text);
            dsi_strbuf_free(&buf);
        }
        return DS_OK;
    }
    ds_sim_summary_t sum;
    ds_sim_get_summary(search->sim, &sum);
    ds_search_result_t r;
    memset(&r, 0, sizeof(r));
    r.strategy = c->strategy;
    r.candidate = index;
    r.iteration_s = r.iteration_low_s = r.iteration_high_s = sum.iteration_s;
    r.samples_per_s = sum.samples_per_s;
    r.tokens_per_s = sum.tokens_per_s;
    r.model_tflops_per_gpu = sum.model_tflops_per_gpu;
    r.mfu = sum.mfu;
    r.hfu = sum.hfu;
    r.bubble_fraction = sum.bubble_fraction;
    r.comm_exposed_s = sum.comm_exposed_s;
    r.memory_GiB = sum.peak_memory_GiB;
    r.lower_bound_s = c->lower_bound_s;
    r.assumed_share = sum.assumed_share;
    /* The hash tells equivalent results apart: needed by a result kept (as
     * the worst, or one not slower than the K-th best), not by one dropped. */
    if (!l->have_worst || better(&l->worst, &r) || r.iteration_s <= kth_best(l)) {
        double t1 = dsi_now_s();
        r.timeline_hash = ds_sim_timeline_hash(search->sim);
        l->sim_cpu_s += dsi_now_s() - t1; /* part of the simulation's time */
    }
    l->simulated++;
    return local_add(l, &r);
}

/* What every rank sends to rank 0. */
typedef struct block_header {
    int64_t simulated, bounded, failed;
    double sim_cpu_s;
    int32_t count, have_worst;
    char first_error[256];
} block_header_t;

static size_t block_size(int count)
{
    return sizeof(block_header_t) + ((size_t)count + 1) * sizeof(ds_search_result_t);
}

/* The block of block_size(l->count) bytes: header, results, worst. */
static void pack(const local_t *l, unsigned char *block)
{
    block_header_t h;
    memset(&h, 0, sizeof(h));
    h.simulated = l->simulated;
    h.bounded = l->bounded;
    h.failed = l->failed;
    h.sim_cpu_s = l->sim_cpu_s;
    h.count = l->count;
    h.have_worst = l->have_worst;
    memcpy(h.first_error, l->first_error, sizeof(h.first_error));
    memcpy(block, &h, sizeof(h));
    ds_search_result_t *r = (ds_search_result_t *)(void *)(block + sizeof(h));
    memcpy(r, l->top, (size_t)l->count * sizeof(*r));
    if (l->have_worst)
        r[l->count] = l->worst;
}

static int by_equivalence(const void *x, const void *y)
{
    const ds_search_result_t *a = x, *b = y;
    if (a->timeline_hash != b->timeline_hash)
        return a->timeline_hash < b->timeline_hash ? -1 : 1;
    if (a->iteration_s != b->iteration_s)
        return a->iteration_s < b->iteration_s ? -1 : 1;
    if (a->memory_GiB != b->memory_GiB)
        return a->memory_GiB < b->memory_GiB ? -1 : 1;
    return (a->candidate > b->candidate) - (a->candidate < b->candidate);
}

/* Joins the equivalent results of several ranks; returns the count left. */
static size_t join_all(ds_search_result_t *all, size_t n)
{
    if (n < 2)
        return n;
    qsort(all, n, sizeof(*all), by_equivalence);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (kept > 0 && equivalent(&all[kept - 1], &all[i]))
            join_variants(&all[kept - 1], &all[i]);
        else
            all[kept++] = all[i];
    }
    return kept;
}

/* Rank 0: every rank's block (at offsets[r]) into the search's results. */
static ds_status_t merge(ds_search_t *search, const unsigned char *blocks, const int *offsets,
                         int ranks, int k)
{
    ds_search_stats_t *st = &search->stats;
    ds_search_result_t *all = NULL;
    size_t total = 1;
    for (int r = 0; r < ranks; r++) {
        block_header_t h;
        memcpy(&h, blocks + offsets[r], sizeof(h));
        total += (size_t)h.count;
    }
    DSI_TRY(dsi_malloc(total * sizeof(*all), &all));
    size_t n = 0;
    search->have_worst = 0;
    st->simulated = st->bounded = st->failed = 0;
    st->sim_cpu_s = 0.0;
    st->first_error[0] = '\0';
    for (int r = 0; r < ranks; r++) {
        const unsigned char *block = blocks + offsets[r];
        block_header_t h;
        memcpy(&h, block, sizeof(h));
        const ds_search_result_t *res =
            (const ds_search_result_t *)(const void *)(block + sizeof(h));
        st->simulated += h.simulated;
        st->bounded += h.bounded;
        st->failed += h.failed;
        st->sim_cpu_s += h.sim_cpu_s;
        if (st->first_error[0] == '\0' && h.first_error[0] != '\0')
            memcpy(st->first_error, h.first_error, sizeof(st->first_error));
        for (int i = 0; i < h.count; i++)
            all[n++] = res[i];
        if (h.have_worst && (!search->have_worst || better(&search->worst, &res[h.count]))) {
            search->worst = res[h.count];
            search->have_worst = 1;
        }
    }
    if (!search->opt.all_variants)
        n = join_all(all, n);
    qsort(all, n, sizeof(*all), by_rank);
    search->num_results = DSI_MIN(n, (size_t)k);
    ds_status_t status = dsi_realloc_array(
        &search->results, search->num_results ? search->num_results : 1, sizeof(*search->results));
    if (status == DS_OK)
        memcpy(search->results, all, search->num_results * sizeof(*all));
    dsi_free(all);
    st->worst_exact = st->bounded == 0 && st->failed == 0;
    return status;
}

/* The numbers a run without the timeline leaves out (bubble, exposed
 * communication) and the band of the iteration time, for the results shown:
 * the ranked ones and the worst. */
static ds_status_t add_details(ds_search_t *search, const ds_cost_table_t *costs,
                               const ds_sim_options_t *so)
{
    ds_sim_options_t full = *so, low = *so, high = *so;
    full.keep_timeline = 1;
    low.band = DS_SIM_BAND_LOW;
    high.band = DS_SIM_BAND_HIGH;
    size_t n = search->num_results + (search->have_worst ? 1 : 0);
    for (size_t i = 0; i < n; i++) {
        ds_search_result_t *r = i < search->num_results ? &search->results[i] : &search->worst;
        DSI_TRY(
            ds_sim_run(search->sim, search->model, &r->strategy, &search->cluster, costs, &full));
        ds_sim_summary_t sum;
        ds_sim_get_summary(search->sim, &sum);
        if (sum.iteration_s != r->iteration_s)
            return DSI_ERROR(DS_ERR_INTERNAL,
                             "the simulator gave %.9g s and then %.9g s for the same strategy",
                             r->iteration_s, sum.iteration_s);
        r->bubble_fraction = sum.bubble_fraction;
        r->comm_exposed_s = sum.comm_exposed_s;
        r->band_comm_keys = sum.banded_comm_keys;
        r->band_device_model_keys = sum.banded_compute_keys;
        DSI_TRY(
            ds_sim_run(search->sim, search->model, &r->strategy, &search->cluster, costs, &low));
        ds_sim_get_summary(search->sim, &sum);
        r->iteration_low_s = sum.iteration_s;
        DSI_TRY(
            ds_sim_run(search->sim, search->model, &r->strategy, &search->cluster, costs, &high));
        ds_sim_get_summary(search->sim, &sum);
        r->iteration_high_s = sum.iteration_s;
    }
    return DS_OK;
}

/* Rank 0's results and counts to every rank. */
static ds_status_t share_results(ds_search_t *search, MPI_Comm comm, int rank)
{
    ds_status_t status = DS_OK;
    struct {
        int64_t num_results;
        int32_t have_worst;
        ds_search_result_t worst;
        ds_search_stats_t stats;
    } head;
    memset(&head, 0, sizeof(head));
    if (rank == 0) {
        head.num_results = (int64_t)search->num_results;
        head.have_worst = search->have_worst;
        head.worst = search->worst;
        head.stats = search->stats;
    }
    DSI_MPI_TRY_GOTO(MPI_Bcast(&head, (int)sizeof(head), MPI_BYTE, 0, comm), status, out);
    if (rank != 0) {
        double enumerate_s = search->stats.enumerate_s, bound_s = search->stats.bound_s;
        search->num_results = (size_t)head.num_results;
        search->have_worst = head.have_worst;
        search->worst = head.worst;
        search->stats = head.stats;
        search->stats.enumerate_s = enumerate_s;
        search->stats.bound_s = bound_s;
        DSI_TRY(dsi_realloc_array(&search->results, search->num_results ? search->num_results : 1,
                                  sizeof(*search->results)));
    }
    if (search->num_results > 0)
        DSI_MPI_TRY_GOTO(MPI_Bcast(search->results,
                                   (int)(search->num_results * sizeof(*search->results)), MPI_BYTE,
                                   0, comm),
                         status, out);
out:
    return status;
}

/* The lower bound of every candidate: each rank computes its share, once
 * per distinct strategy without its data-parallel algorithm (which prices
 * the gradient collectives only, never a layer pass; a parameter server
 * stays, as its own structure), then every rank has all of them. */
static ds_status_t compute_bounds(ds_search_t *search, const ds_cost_table_t *costs,
                                  const ds_sim_options_t *so, MPI_Comm comm, int rank, int size)
{
    size_t n = search->num_cand;
    size_t per_rank = (n + (size_t)size - 1) / (size_t)size;
    double *mine = NULL, *all = NULL;
    shape_entry_t *keys = NULL; /* entry.index: j of candidate rank + j x size */
    ds_status_t status = DS_OK;
    DSI_TRY(dsi_calloc(per_rank ? per_rank : 1, sizeof(*mine), &mine));
    DSI_TRY_GOTO(dsi_calloc(per_rank ? per_rank : 1, sizeof(*keys), &keys), status, out);
    size_t count = 0;
    for (size_t i = (size_t)rank; i < n; i += (size_t)size, count++) {
        memcpy(&keys[count].shape, &search->cand[i].strategy, sizeof(keys[count].shape));
        if (keys[count].shape.dp_algo != DS_DP_PS)
            keys[count].shape.dp_algo = DS_DP_AUTO;
        keys[count].entry.index = (int64_t)count;
    }
    qsort(keys, count, sizeof(*keys), by_shape);
    for (size_t t = 0; t < count; t++) {
        size_t j = (size_t)keys[t].entry.index;
        if (t > 0 && memcmp(&keys[t].shape, &keys[t - 1].shape, sizeof(keys[t].shape)) == 0) {
            mine[j] = mine[keys[t - 1].entry.index];
            continue;
        }
        ds_sim_estimate_t est;
        status = ds_sim_estimate(search->sim, search->model,
                                 &search->cand[(size_t)rank + j * (size_t)size].strategy,
                                 &search->cluster, costs, so, &est);
        if (status != DS_OK)
            break;
        mine[j] = est.lower_bound_s;
    }
    status = agree(comm, rank, status);
    if (status != DS_OK)
        goto out;
    if (comm == MPI_COMM_NULL) {
        for (size_t i = 0; i < n; i++)
            search->cand[i].lower_bound_s = mine[i];
        goto out;
    }
    if (per_rank * (size_t)size > (size_t)INT_MAX) {
        status = DSI_ERROR(DS_ERR_OVERFLOW, "%zu candidates are too many to share over %d ranks", n,
                           size);
        goto out;
    }
    size_t padded = per_rank * (size_t)size;
    DSI_TRY_GOTO(dsi_calloc(padded > 0 ? padded : 1, sizeof(*all), &all), status, out);
    DSI_MPI_TRY_GOTO(
        MPI_Allgather(mine, (int)per_rank, MPI_DOUBLE, all, (int)per_rank, MPI_DOUBLE, comm),
        status, out);
    for (size_t i = 0; i < n; i++)
        search->cand[i].lower_bound_s = all[(i % (size_t)size) * per_rank + i / (size_t)size];
out:
    dsi_free(keys);
    dsi_free(mine);
    dsi_free(all);
    return status;
}

/* Times shared per rank and round: its best ones, up to this many. */
#define SHARED_TIMES 64

/* What one rank shares in a round: its best times so far (HUGE_VAL where it
 * has fewer), and whether it is done. */
static void share_fill(const local_t *l, int width, bool mine_done, double *out)
{
    for (int i = 0; i < width; i++)
        out[i] = i < l->count ? l->top[i].iteration_s : HUGE_VAL;
    if (width < l->k) /* only the K-th best counts when K is large */
        out[width - 1] = kth_best(l);
    out[width] = mine_done ? 1.0 : 0.0;
}

/* The K-th best time over every rank's shared times (or, for K above
 * SHARED_TIMES, the smallest of the ranks' K-th best); 1 in *all_done_p when
 * every rank is done.  With `distinct`, equal times count once: two ranks may
 * hold variants of one timeline, and the K-th distinct time is an upper
 * bound of the K-th best distinct timeline's. */
static double share_threshold(double *all, int size, int width, int k, bool distinct,
                              bool *all_done_p)
{
    bool all_done = true;
    for (int r = 0; r < size; r++)
        all_done &= all[(size_t)r * (width + 1) + width] > 0.0;
    *all_done_p = all_done;
    double threshold = HUGE_VAL;
    if (k > width) {
        for (int r = 0; r < size; r++)
            threshold = DSI_MIN(threshold, all[(size_t)r * (width + 1) + width - 1]);
        return threshold;
    }
    /* Compact the times, then the k-th smallest. */
    size_t n = 0;
    for (int r = 0; r < size; r++)
        for (int i = 0; i < width; i++)
            all[n++] = all[(size_t)r * (width + 1) + i];
    qsort(all, n, sizeof(*all), dsi_compare_double);
    if (!distinct)
        return all[k - 1];
    int seen = 0;
    for (size_t i = 0; i < n && all[i] < HUGE_VAL; i++)
        if ((i == 0 || all[i] != all[i - 1]) && ++seen == k)
            return all[i];
    return HUGE_VAL;
}

/* Simulates this rank's share of the candidates (positions rank, rank +
 * size, ... of `order`) until the bound of the next one exceeds the K-th
 * best time known: every later bound does too.  With several ranks, the
 * best times are shared while the ranks work (a non-blocking all-gather per
 * round, rounds until every rank is done), so the threshold is the K-th best
 * over all ranks: a candidate whose bound exceeds it cannot enter the top K. */
static ds_status_t evaluate_share(ds_search_t *search, const ds_cost_table_t *costs,
                                  const ds_sim_options_t *so, const bound_entry_t *order,
                                  uint8_t *done, MPI_Comm comm, int rank, int size, local_t *l)
{
    size_t n = search->num_cand, j = (size_t)rank;
    ds_status_t status = DS_OK, mpi_status = DS_OK;
    double shared = HUGE_VAL;
    bool mine_done = false, all_done = false;
    MPI_Request request = MPI_REQUEST_NULL;
    int width = DSI_MIN(l->k, SHARED_TIMES);
    double send[SHARED_TIMES + 1], *recv = NULL;
    if (comm != MPI_COMM_NULL) {
        DSI_TRY(dsi_calloc((size_t)size * (size_t)(width + 1), sizeof(*recv), &recv));
        share_fill(l, width, false, send);
        DSI_MPI_TRY_GOTO(MPI_Iallgather(send, width + 1, MPI_DOUBLE, recv, width + 1, MPI_DOUBLE,
                                        comm, &request),
                         mpi_status, out);
    }
    for (;;) {
        if (comm != MPI_COMM_NULL) {
            int complete = 0;
            if (mine_done)
                DSI_MPI_TRY_GOTO(MPI_Wait(&request, MPI_STATUS_IGNORE), mpi_status, out);
            else
                DSI_MPI_TRY_GOTO(MPI_Test(&request, &complete, MPI_STATUS_IGNORE), mpi_status, out);
            if (mine_done || complete) {
                double threshold = share_threshold(recv, size, width, l->k, l->group, &all_done);
                shared = DSI_MIN(shared, threshold);
                if (all_done)
                    break;
                share_fill(l, width, mine_done, send);
                DSI_MPI_TRY_GOTO(MPI_Iallgather(send, width + 1, MPI_DOUBLE, recv, width + 1,
                                                MPI_DOUBLE, comm, &request),
                                 mpi_status, out);
                /* A rank with work left simulates a candidate between two exchanges: on
                 * one rank every exchange completes at once and would leave no turn. */
                if (mine_done)
                    continue;
            }
        } else if (mine_done) {
            break;
        }
        double threshold = DSI_MIN(shared, kth_best(l));
        if (j >= n || status != DS_OK || (search->opt.bound && order[j].lb > threshold)) {
            for (; j < n; j += (size_t)size)
                l->bounded++;
            mine_done = true;
            continue;
        }
        status = simulate(search, order[j].index, costs, so, l);
        done[j] = 1;
        j += (size_t)size;
    }
out:
    dsi_free(recv);
    if (mpi_status != DS_OK)
        return mpi_status;
    return status;
}

ds_status_t ds_search_run(ds_search_t *search, const ds_cost_table_t *costs, MPI_Comm comm)
{
    ds_status_t status = DS_OK;
    MPI_Comm dup = MPI_COMM_NULL;
    int rank = 0, size = 1;
    if (comm != MPI_COMM_NULL) {
        DSI_TRY(dsi_mpi_dup(comm, &dup));
        DSI_MPI_TRY_GOTO(MPI_Comm_rank(dup, &rank), status, err_dup);
        DSI_MPI_TRY_GOTO(MPI_Comm_size(dup, &size), status, err_dup);
    }
    if (!search->enumerated)
        status = ds_search_enumerate(search);
    DSI_TRY_GOTO(agree(dup, rank, status), status, err_dup);
    search->num_results = 0;
    search->have_worst = 0;
    search->stats.ranks = size;

    ds_sim_options_t so;
    ds_sim_options_init(&so);
    so.mode = DS_SIM_SYMMETRIC;
    so.granularity = search->opt.granularity;
    so.estimate_missing = search->opt.estimate_missing;
    so.comm_model = search->opt.comm_model;
    so.peak_tflops = search->opt.peak_tflops;
    so.keep_timeline = 0;
    so.hash_timeline = 0; /* simulate() asks for it when a result is kept */

    double t0 = dsi_now_s();
    DSI_TRY_GOTO(compute_bounds(search, costs, &so, dup, rank, size), status, err_dup);
    double t1 = dsi_now_s();
    search->stats.bound_s = t1 - t0;

    size_t n = search->num_cand;
    int k = search->opt.top_k;
    bound_entry_t *order = NULL;
    unsigned char *blocks = NULL, *block = NULL;
    uint8_t *done = NULL;
    local_t l;
    memset(&l, 0, sizeof(l));
    l.k = k;
    l.group = !search->opt.all_variants;
    l.capacity = k;
    DSI_TRY_GOTO(dsi_calloc(n ? n : 1, sizeof(*order), &order), status, err_dup);
    DSI_TRY_GOTO(dsi_calloc(n ? n : 1, 1, &done), status, err_order);
    DSI_TRY_GOTO(dsi_calloc((size_t)k, sizeof(*l.top), &l.top), status, err_done);
    for (size_t i = 0; i < n; i++) {
        order[i].lb = search->cand[i].lower_bound_s;
        order[i].index = (int64_t)i;
    }
    qsort(order, n, sizeof(*order), by_bound);
    if (!search->opt.bound)
        DSI_TRY_GOTO(order_by_shape(search, order, n, size), status, err_top);

    /* This rank's share, in bound order. */
    status = evaluate_share(search, costs, &so, order, done, dup, rank, size, &l);
    /* The worst: also simulate the K candidates with the highest bounds. */
    for (size_t t = n > (size_t)k ? n - (size_t)k : 0; t < n && status == DS_OK && l.bounded > 0;
         t++) {
        if (t % (size_t)size != (size_t)rank || done[t])
            continue;
        status = simulate(search, order[t].index, costs, &so, &l);
        done[t] = 1;
        l.bounded--;
    }
    status = agree(dup, rank, status);
    if (status != DS_OK)
        goto err_top;

    /* Rank 0 merges every rank's top K, worst and counts. */
    size_t bs = block_size(l.count);
    int *sizes = NULL, *offsets = NULL;
    if (bs > (size_t)INT_MAX) {
        status = DSI_ERROR(DS_ERR_OVERFLOW, "%d results are too many to send to rank 0", l.count);
        goto err_top;
    }
    DSI_TRY_GOTO(dsi_calloc(1, bs, &block), status, err_top);
    pack(&l, block);
    status = dsi_calloc((size_t)size, sizeof(int), &sizes);
    if (status == DS_OK)
        status = dsi_calloc((size_t)size, sizeof(int), &offsets);
    status = agree(dup, rank, status);
    if (status != DS_OK)
        goto err_block;
    int mine = (int)bs;
    if (dup != MPI_COMM_NULL)
        DSI_MPI_TRY_GOTO(MPI_Gather(&mine, 1, MPI_INT, sizes, 1, MPI_INT, 0, dup), status,
                         err_block);
    else
        sizes[0] = mine;
    size_t all_bytes = 0;
    for (int r = 0; r < size && rank == 0; r++) {
        offsets[r] = (int)all_bytes;
        all_bytes += (size_t)sizes[r];
    }
    if (all_bytes > (size_t)INT_MAX)
        status = DSI_ERROR(DS_ERR_OVERFLOW, "the results of %d ranks are too many to merge", size);
    else if (rank == 0)
        status = dsi_calloc(all_bytes, 1, &blocks);
    status = agree(dup, rank, status);
    if (status != DS_OK)
        goto err_block;
    if (dup != MPI_COMM_NULL)
        DSI_MPI_TRY_GOTO(
            MPI_Gatherv(block, mine, MPI_BYTE, blocks, sizes, offsets, MPI_BYTE, 0, dup), status,
            err_blocks);
    else
        memcpy(blocks, block, bs);
    if (rank == 0)
        status = merge(search, blocks, offsets, size, k);
    if (rank == 0 && status == DS_OK)
        status = add_details(search, costs, &so);
    status = agree(dup, rank, status);
    if (status == DS_OK && dup != MPI_COMM_NULL)
        status = share_results(search, dup, rank);
    search->stats.simulate_s = dsi_now_s() - t1;
err_blocks:
    dsi_free(blocks);
err_block:
    dsi_free(block);
    dsi_free(sizes);
    dsi_free(offsets);
err_top:
    dsi_free(l.top);
err_done:
    dsi_free(done);
err_order:
    dsi_free(order);
err_dup:
    if (dup != MPI_COMM_NULL)
        MPI_Comm_free(&dup);
    return status;
}

size_t ds_search_result_count(const ds_search_t *search)
{
    return search->num_results;
}

ds_status_t ds_search_result_at(const ds_search_t *search, size_t rank,
                                ds_search_result_t *result_p)
{
    if (rank >= search->num_results)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "result %zu (accepted: below %zu)", rank,
                         search->num_results);
    *result_p = search->results[rank];
    return DS_OK;
}

ds_status_t ds_search_worst(const ds_search_t *search, ds_search_result_t *result_p)
{
    if (!search->have_worst)
        return DSI_ERROR(DS_ERR_NOT_FOUND, "no candidate was simulated");
    *result_p = search->worst;
    return DS_OK;
}

void ds_search_get_stats(const ds_search_t *search, ds_search_stats_t *stats)
{
    *stats = search->stats;
}

/* ---- what variants change ------------------------------------------------------------------ */

/* The fields the space enumerates, as the strategy grammar writes them, with
 * the text of the value ds_strategy_format leaves out. */
static const struct {
    const char *key;
    const char *omitted;
} variant_fields[] = {
    {"dp", NULL},
    {"tp", NULL},
    {"pp", NULL},
    {"mbs", NULL},
    {"schedule", NULL},
    {"vpp", "vpp=1"},
    {"sp", "no-sp"},
    {"recompute", "recompute=none"},
    {"zero", "zero=0"},
    {"dp-algo", "dp-algo=auto"},
    {"ps-servers", "ps-servers=0"},
};

/* The item of field `f` in the canonical text of a strategy. */
static void field_item(const char *canonical, size_t f, char *item, size_t size)
{
    const char *key = variant_fields[f].key;
    size_t len = strlen(key);
    for (const char *p = canonical; *p != '\0';) {
        size_t n = strcspn(p, ",");
        if (n >= len && strncmp(p, key, len) == 0 && (p[len] == '=' || n == len)) {
            snprintf(item, size, "%.*s", (int)n, p);
            return;
        }
        p += n + (p[n] == ',');
    }
    snprintf(item, size, "%s", variant_fields[f].omitted != NULL ? variant_fields[f].omitted : "?");
}

/* The fields in which `v` differs from `r`: a bit each. */
static unsigned differing_fields(const char *r, const char *v)
{
    unsigned bits = 0;
    for (size_t f = 0; f < DSI_ARRAY_SIZE(variant_fields); f++) {
        char a[64], b[64];
        field_item(r, f, a, sizeof(a));
        field_item(v, f, b, sizeof(b));
        if (strcmp(a, b) != 0)
            bits |= 1u << f;
    }
    return bits;
}

void ds_search_variants_text(const ds_search_t *search, const ds_search_result_t *result,
                             char *text, size_t size)
{
    if (size == 0)
        return;
    int stored = DSI_MIN(result->num_variants, DS_SEARCH_MAX_VARIANTS), shown = 0;
    char canonical[DS_STRATEGY_TEXT_MAX], texts[DS_SEARCH_MAX_VARIANTS][DS_STRATEGY_TEXT_MAX];
    unsigned fields[DS_SEARCH_MAX_VARIANTS];
    bool done[DS_SEARCH_MAX_VARIANTS] = {false};
    ds_strategy_format(&result->strategy, canonical, sizeof(canonical));
    for (int i = 0; i < stored; i++) {
        const ds_strategy_t *s = ds_search_candidate_at(search, (size_t)result->variants[i]);
        if (s == NULL)
            continue;
        ds_strategy_format(s, texts[shown], sizeof(texts[shown]));
        fields[shown] = differing_fields(canonical, texts[shown]);
        shown++;
    }
    dsi_strbuf_t buf;
    dsi_strbuf_init_fixed(&buf, text, size);
    /* Variants that change the same fields form a group: "key=a,b" when
     * that is one field, "k1=a+k2=b, k1=c+k2=d" otherwise. */
    for (int i = 0; i < shown; i++) {
        if (done[i])
            continue;
        bool single = fields[i] != 0 && (fields[i] & (fields[i] - 1)) == 0;
        dsi_strbuf_append(&buf, buf.length > 0 ? "; " : "");
        for (int j = i, in_group = 0; j < shown; j++) {
            if (done[j] || fields[j] != fields[i])
                continue;
            done[j] = true;
            if (fields[j] == 0) { /* a field the list does not name */
                dsi_strbuf_appendf(&buf, "%s%s", in_group++ > 0 ? ", " : "", texts[j]);
                continue;
            }
            for (size_t f = 0, parts = 0; f < DSI_ARRAY_SIZE(variant_fields); f++) {
                if (!(fields[j] & (1u << f)))
                    continue;
                char item[64];
                field_item(texts[j], f, item, sizeof(item));
                const char *value = strchr(item, '=');
                if (single && in_group > 0)
                    dsi_strbuf_appendf(&buf, ",%s", value != NULL ? value + 1 : item);
                else
                    dsi_strbuf_appendf(&buf, "%s%s",
                                       parts > 0      ? "+"
                                       : in_group > 0 ? ", "
                                                      : "",
                                       item);
                parts++;
            }
            in_group++;
        }
    }
    if (result->num_variants > shown)
        dsi_strbuf_appendf(&buf, "%sand %d more", buf.length > 0 ? ", " : "",
                           (int)(result->num_variants - shown));
    dsi_strbuf_free(&buf);
}
