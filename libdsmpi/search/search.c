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

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

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

static ds_status_t visit_combination(ds_search_t *search, const ds_strategy_t *combo, void *arg)
{
    (void)arg;
    ds_search_stats_t *st = &search->stats;
    st->enumerated++;
    ds_strategy_t s = *combo;
    /* Devices per node 0: no warning per candidate for tp spanning nodes. */
    if (ds_strategy_resolve(&s, search->model, ds_cluster_num_gpus(&search->cluster), 0) != DS_OK) {
        if (st->invalid++ == 0)
            snprintf(st->first_invalid, sizeof(st->first_invalid), "%s", ds_last_error());
        return DS_OK;
    }
    ds_sim_options_t so;
    ds_sim_options_init(&so);
    ds_sim_estimate_t est;
    DSI_TRY(ds_sim_estimate(search->sim, search->model, &s, &search->cluster, NULL, &so, &est));
    if (est.oom) {
        double need = est.memory.total_B / GIB;
        if (st->out_of_memory++ == 0 || need < st->min_oom_GiB)
            st->min_oom_GiB = need;
        return DS_OK;
    }
    return add_candidate(search, &s, est.memory.total_B / GIB);
}

ds_status_t ds_search_enumerate(ds_search_t *search)
{
    double t0 = now_s();
    memset(&search->stats, 0, sizeof(search->stats));
    search->num_cand = 0;
    search->num_results = 0;
    search->have_worst = 0;
    search->enumerated = 0;
    DSI_TRY(dsi_search_each_combination(search, visit_combination, NULL));
    search->stats.candidates = (int64_t)search->num_cand;
    search->stats.enumerate_s = now_s() - t0;
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

/* Local state of one rank. */
typedef struct local {
    ds_search_result_t *top; /* sorted, at most k */
    int count, k;
    ds_search_result_t worst;
    int have_worst;
    int64_t simulated, bounded, failed;
    double sim_cpu_s;
    char first_error[256];
} local_t;

static void local_add(local_t *l, const ds_search_result_t *r)
{
    if (!l->have_worst || better(&l->worst, r)) {
        l->worst = *r;
        l->have_worst = 1;
    }
    if (l->count == l->k && !better(r, &l->top[l->k - 1]))
        return;
    int i = l->count < l->k ? l->count++ : l->k - 1;
    while (i > 0 && better(r, &l->top[i - 1])) {
        l->top[i] = l->top[i - 1];
        i--;
    }
    l->top[i] = *r;
}

static ds_status_t simulate(ds_search_t *search, int64_t index, const ds_cost_table_t *costs,
                            const ds_sim_options_t *so, local_t *l)
{
    const dsi_candidate_t *c = &search->cand[index];
    double t0 = now_s();
    ds_status_t status =
        ds_sim_run(search->sim, search->model, &c->strategy, &search->cluster, costs, so);
    l->sim_cpu_s += now_s() - t0;
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
    r.iteration_s = sum.iteration_s;
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
    l->simulated++;
    local_add(l, &r);
    return DS_OK;
}

/* What every rank sends to rank 0. */
typedef struct block_header {
    int64_t simulated, bounded, failed;
    double sim_cpu_s;
    int32_t count, have_worst;
    char first_error[256];
} block_header_t;

static size_t block_size(int k)
{
    return sizeof(block_header_t) + ((size_t)k + 1) * sizeof(ds_search_result_t);
}

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
        r[l->k] = l->worst;
}

/* Rank 0: every rank's block into the search's results. */
static ds_status_t merge(ds_search_t *search, const unsigned char *blocks, int ranks, int k)
{
    ds_search_stats_t *st = &search->stats;
    size_t bs = block_size(k);
    ds_search_result_t *all = NULL;
    DSI_TRY(dsi_malloc(((size_t)ranks * k + 1) * sizeof(*all), &all));
    size_t n = 0;
    search->have_worst = 0;
    st->simulated = st->bounded = st->failed = 0;
    st->sim_cpu_s = 0.0;
    st->first_error[0] = '\0';
    for (int r = 0; r < ranks; r++) {
        const unsigned char *block = blocks + (size_t)r * bs;
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
        if (h.have_worst && (!search->have_worst || better(&search->worst, &res[k]))) {
            search->worst = res[k];
            search->have_worst = 1;
        }
    }
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
 * communication), for the results shown: the ranked ones and the worst. */
static ds_status_t add_details(ds_search_t *search, const ds_cost_table_t *costs,
                               const ds_sim_options_t *so)
{
    ds_sim_options_t full = *so;
    full.keep_timeline = 1;
    size_t n = search->num_results + (search->have_worst ? 1 : 0);
    for (size_t i = 0; i < n; i++) {
        ds_search_result_t *r = i < search->num_results ? &search->results[i] : &search->worst;
        DSI_TRY(ds_sim_run(search->sim, search->model, &r->strategy, &search->cluster, costs, &full));
        ds_sim_summary_t sum;
        ds_sim_get_summary(search->sim, &sum);
        if (sum.iteration_s != r->iteration_s)
            return DSI_ERROR(DS_ERR_INTERNAL, "the simulator gave %.9g s and then %.9g s for the same strategy",
                             r->iteration_s, sum.iteration_s);
        r->bubble_fraction = sum.bubble_fraction;
        r->comm_exposed_s = sum.comm_exposed_s;
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

/* The lower bound of every candidate: each rank computes its share, then
 * every rank has all of them. */
static ds_status_t compute_bounds(ds_search_t *search, const ds_cost_table_t *costs,
                                  const ds_sim_options_t *so, MPI_Comm comm, int rank, int size)
{
    size_t n = search->num_cand;
    size_t per_rank = (n + (size_t)size - 1) / (size_t)size;
    double *mine = NULL, *all = NULL;
    ds_status_t status = DS_OK;
    DSI_TRY(dsi_calloc(per_rank ? per_rank : 1, sizeof(*mine), &mine));
    for (size_t j = 0, i = (size_t)rank; i < n; i += (size_t)size, j++) {
        ds_sim_estimate_t est;
        status = ds_sim_estimate(search->sim, search->model, &search->cand[i].strategy,
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
    dsi_free(mine);
    dsi_free(all);
    return status;
}

static double kth_best(const local_t *l)
{
    return l->count == l->k ? l->top[l->k - 1].iteration_s : HUGE_VAL;
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

static int by_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* The K-th best time over every rank's shared times (or, for K above
 * SHARED_TIMES, the smallest of the ranks' K-th best); 1 in *all_done_p when
 * every rank is done. */
static double share_threshold(double *all, int size, int width, int k, bool *all_done_p)
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
    qsort(all, n, sizeof(*all), by_double);
    return all[k - 1];
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
                double threshold = share_threshold(recv, size, width, l->k, &all_done);
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

    double t0 = now_s();
    DSI_TRY_GOTO(compute_bounds(search, costs, &so, dup, rank, size), status, err_dup);
    double t1 = now_s();
    search->stats.bound_s = t1 - t0;

    size_t n = search->num_cand;
    int k = search->opt.top_k;
    bound_entry_t *order = NULL;
    unsigned char *blocks = NULL, *block = NULL;
    uint8_t *done = NULL;
    local_t l;
    memset(&l, 0, sizeof(l));
    l.k = k;
    DSI_TRY_GOTO(dsi_calloc(n ? n : 1, sizeof(*order), &order), status, err_dup);
    DSI_TRY_GOTO(dsi_calloc(n ? n : 1, 1, &done), status, err_order);
    DSI_TRY_GOTO(dsi_calloc((size_t)k, sizeof(*l.top), &l.top), status, err_done);
    for (size_t i = 0; i < n; i++) {
        order[i].lb = search->cand[i].lower_bound_s;
        order[i].index = (int64_t)i;
    }
    qsort(order, n, sizeof(*order), by_bound);

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
    size_t bs = block_size(k);
    DSI_TRY_GOTO(dsi_calloc(1, bs, &block), status, err_top);
    pack(&l, block);
    if (rank == 0)
        status = dsi_calloc((size_t)size, bs, &blocks);
    status = agree(dup, rank, status);
    if (status != DS_OK)
        goto err_block;
    if (dup != MPI_COMM_NULL)
        DSI_MPI_TRY_GOTO(MPI_Gather(block, (int)bs, MPI_BYTE, blocks, (int)bs, MPI_BYTE, 0, dup),
                         status, err_blocks);
    else
        memcpy(blocks, block, bs);
    if (rank == 0)
        status = merge(search, blocks, size, k);
    if (rank == 0 && status == DS_OK)
        status = add_details(search, costs, &so);
    status = agree(dup, rank, status);
    if (status == DS_OK && dup != MPI_COMM_NULL)
        status = share_results(search, dup, rank);
    search->stats.simulate_s = now_s() - t1;
err_blocks:
    dsi_free(blocks);
err_block:
    dsi_free(block);
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
