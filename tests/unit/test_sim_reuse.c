/* Reuse of a built graph across runs (libdsmpi/sim/reuse.c): strategy A is
 * simulated, then B on the same simulator, which keeps A's graph where its
 * structure is B's and only sets B's durations.  B's summary, timeline hash
 * and per-device numbers must equal those of a fresh simulator bit for bit,
 * and so must A's when simulated again after B.  The pairs cover what only
 * changes durations (recompute, DP algorithm, flash attention, FP8: reused)
 * and what changes the structure (micro-batches, sequence parallelism, the
 * parameter server, the schedule, ZeRO stage: built anew).  A run whose
 * durations all equal the last run's keeps that run's evaluation: B run
 * twice must still equal a fresh run; a run that changes only the DP
 * algorithm keeps the layer nodes without repricing them (dsi_phase_t.kept)
 * and must equal a fresh run too. */
#include "sim_support.h"

#include "sim/dsi_sim.h"

#include <stdbool.h>

typedef struct reuse_pair {
    const char *model;
    const char *a, *b; /* ds_strategy_parse text, before the pair's common fields */
    int nodes, per_node;
    const char *device;
    int granularity; /* ds_sim_granularity_t */
    int with_table;  /* 1: A's hashed costs, the rest estimated; 0: every cost estimated;
                        2: as 1, and what A's gradient buckets cost the compute stream */
    int reuse;       /* 1: B must reuse A's graph; 0: must not; -1: either */
} reuse_pair_t;

#define LAYER DS_SIM_LAYER
#define STAGE DS_SIM_STAGE

static const reuse_pair_t pairs[] = {
    {"gpt2-medium", "dp=2,tp=2,pp=2,mbs=1,gbs=16", "dp=2,tp=2,pp=2,mbs=1,gbs=16,recompute=full", 2,
     4, "a100-80g", STAGE, 2, 1},
    {"gpt2-medium", "dp=4,tp=1,pp=2,mbs=1,gbs=16,bucket=8M",
     "dp=4,tp=1,pp=2,mbs=1,gbs=16,bucket=8M,recompute=selective", 2, 4, "a100-80g", LAYER, 2, 1},
    /* A's buckets cost the compute stream, B's (another algorithm, not in
     * the table) do not: the same structure key, but the interference
     * nodes would vanish, so the graph is built anew. */
    {"gpt2-medium", "dp=4,tp=1,pp=2,mbs=1,gbs=16,bucket=8M,dp-algo=ring",
     "dp=4,tp=1,pp=2,mbs=1,gbs=16,bucket=8M,dp-algo=tree", 2, 4, "a100-80g", LAYER, 2, 0},
    {"gpt2-medium", "dp=2,tp=2,pp=2,mbs=1,gbs=16,dp-algo=ring",
     "dp=2,tp=2,pp=2,mbs=1,gbs=16,dp-algo=tree", 2, 4, "a100-80g", LAYER, 1, 1},
    {"llama2-7b", "dp=2,tp=2,pp=2,mbs=1,gbs=8,schedule=interleaved,vpp=2,bucket=32M",
     "dp=2,tp=2,pp=2,mbs=1,gbs=8,schedule=interleaved,vpp=2,bucket=32M,recompute=selective", 2, 4,
     "h100-sxm", LAYER, 0, -1},
    {"llama2-7b", "dp=4,tp=2,pp=1,mbs=1,gbs=8,flash", "dp=4,tp=2,pp=1,mbs=1,gbs=8", 2, 4,
     "h100-sxm", LAYER, 0, -1},
    {"llama2-7b", "dp=2,tp=2,pp=2,mbs=1,gbs=8", "dp=2,tp=2,pp=2,mbs=1,gbs=8,fp8=hybrid", 2, 4,
     "h100-sxm", STAGE, 0, 1},
    {"gpt2-medium", "dp=4,tp=1,pp=1,mbs=1,gbs=12,zero=2,bucket=2M",
     "dp=4,tp=1,pp=1,mbs=1,gbs=12,zero=2,bucket=2M,recompute=full", 2, 2, "a100-80g", STAGE, 1, -1},
    {"llama2-7b", "dp=4,tp=2,pp=1,mbs=1,gbs=8,zero=3",
     "dp=4,tp=2,pp=1,mbs=1,gbs=8,zero=3,dp-algo=ring", 2, 4, "h100-sxm", LAYER, 0, 1},
    {"gpt2-medium", "dp=4,tp=2,pp=1,mbs=1,gbs=16,zero=1,bucket=8M",
     "dp=4,tp=2,pp=1,mbs=1,gbs=16,zero=1,bucket=8M,dp-algo=hierarchical", 1, 8, "a100-80g", LAYER,
     1, 1},
    /* Structures differ: built anew. */
    {"gpt2-medium", "dp=2,tp=2,pp=2,mbs=1,gbs=16", "dp=2,tp=2,pp=2,mbs=2,gbs=16", 2, 4, "a100-80g",
     STAGE, 1, 0},
    {"gpt2-medium", "dp=2,tp=2,pp=2,mbs=1,gbs=16,sp", "dp=2,tp=2,pp=2,mbs=1,gbs=16", 2, 4,
     "a100-80g", LAYER, 1, 0},
    {"gpt2-medium", "dp=4,tp=1,pp=2,mbs=1,gbs=16,dp-algo=ring",
     "dp=4,tp=1,pp=2,mbs=1,gbs=16,dp-algo=ps,ps-servers=2", 2, 4, "a100-80g", LAYER, 1, 0},
    {"gpt2-medium", "dp=2,tp=1,pp=4,mbs=1,gbs=16,schedule=1f1b",
     "dp=2,tp=1,pp=4,mbs=1,gbs=16,schedule=gpipe", 1, 8, "a100-80g", STAGE, 0, 0},
    {"gpt2-medium", "dp=4,tp=1,pp=1,mbs=1,gbs=12,zero=1", "dp=4,tp=1,pp=1,mbs=1,gbs=12,zero=2", 2,
     2, "a100-80g", LAYER, 0, 0},
};

static uint64_t mix(uint64_t h, const void *data, size_t size)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < size; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static uint64_t mix_i64(uint64_t h, int64_t v)
{
    return mix(h, &v, sizeof(v));
}

/* Exact bits: a result that moves by one ulp changes the hash. */
static uint64_t mix_f64(uint64_t h, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof(bits));
    return mix(h, &bits, sizeof(bits));
}

static uint64_t hash_summary(uint64_t h, const ds_sim_summary_t *s)
{
    const double values[] = {s->iteration_s,
                             s->samples_per_s,
                             s->tokens_per_s,
                             s->model_flops,
                             s->hardware_flops,
                             s->model_tflops_per_gpu,
                             s->hardware_tflops_per_gpu,
                             s->mfu,
                             s->hfu,
                             s->bubble_fraction,
                             s->compute_s,
                             s->comm_s,
                             s->comm_exposed_s,
                             s->comm_hidden_s,
                             s->idle_s,
                             s->assumed_share,
                             s->critical_assumed_share,
                             s->peak_memory_GiB};
    for (size_t i = 0; i < DSI_N(values); i++)
        h = mix_f64(h, values[i]);
    const int64_t counts[] = {
        s->num_devices,           s->simulated_devices, s->microbatches, s->assumed_keys,
        s->modelled_keys,         s->graph_nodes,       s->graph_edges,  s->oom,
        (int64_t)s->timeline_hash};
    for (size_t i = 0; i < DSI_N(counts); i++)
        h = mix_i64(h, counts[i]);
    return h;
}

static uint64_t hash_device(uint64_t h, const ds_sim_device_t *d)
{
    const double values[] = {d->speed_factor,  d->compute_s, d->comm_s,        d->comm_exposed_s,
                             d->comm_hidden_s, d->idle_s,    d->tp_s,          d->pp_s,
                             d->dp_s,          d->other_s,   d->assumed_share, d->memory.total_B};
    for (size_t i = 0; i < DSI_N(values); i++)
        h = mix_f64(h, values[i]);
    h = mix_i64(h, d->rank);
    return mix_i64(h, d->represents);
}

static double hashed_rule(const ds_event_key_t *key, const ds_event_t *event, void *arg)
{
    (void)event;
    (void)arg;
    return (double)(1000 + ds_event_key_hash(key) % 99000) * 1e-9; /* 1 to 100 us */
}

/* The keys the run looked up, with their costs and provenance, and the
 * missing ones, in any order (a repriced graph looks them up in another
 * order than a build): a run that keeps the last run's plan (and cuts its
 * caches back) must list what a fresh run lists. */
static uint64_t hash_keys(uint64_t h, ds_sim_t *sim)
{
    uint64_t keys = 0, missing = 0;
    for (size_t i = 0; i < ds_sim_key_count(sim); i++) {
        ds_provenance_t provenance;
        double seconds;
        const ds_event_key_t *key = ds_sim_key_at(sim, i, &provenance, &seconds);
        uint64_t k = mix_i64(0x9e3779b97f4a7c15ULL, (int64_t)ds_event_key_hash(key));
        k = mix_i64(k, (int64_t)provenance);
        keys += mix_f64(k, seconds);
    }
    for (size_t i = 0; i < ds_sim_missing_count(sim); i++)
        missing +=
            mix_i64(0x9e3779b97f4a7c15ULL, (int64_t)ds_event_key_hash(ds_sim_missing_at(sim, i)));
    h = mix_i64(h, (int64_t)ds_sim_key_count(sim));
    h = mix_i64(h, (int64_t)keys);
    h = mix_i64(h, (int64_t)ds_sim_missing_count(sim));
    return mix_i64(h, (int64_t)missing);
}

/* Everything a run without timeline gives, exact bits (the fields
 * test_sim_timelines pins), and the keys it looked up. */
static uint64_t hash_results(ds_sim_t *sim)
{
    uint64_t h = hash_keys(0xcbf29ce484222325ULL, sim);
    ds_sim_summary_t summary;
    ds_sim_get_summary(sim, &summary);
    summary.timeline_hash = ds_sim_timeline_hash(sim);
    h = hash_summary(h, &summary);
    for (size_t i = 0; i < ds_sim_device_count(sim); i++) {
        ds_sim_device_t d;
        CHECK_OK(ds_sim_device_at(sim, i, &d));
        h = hash_device(h, &d);
    }
    return h;
}

/* The overlapped twin of every data-parallel key of the table, at a third
 * of its cost. */
static void add_interference(ds_cost_table_t *table)
{
    size_t n = ds_cost_table_size(table);
    for (size_t i = 0; i < n; i++) {
        const ds_event_key_t *key;
        const ds_cost_t *cost;
        ds_cost_table_at(table, i, &key, &cost);
        if (key->kind != DS_EVENT_COMM || key->group != DS_GROUP_DP ||
            (key->flags & DS_COMM_FLAG_OVERLAPPED))
            continue;
        ds_event_key_t twin = *key;
        twin.flags |= DS_COMM_FLAG_OVERLAPPED;
        ds_cost_t c = *cost;
        c.mean_s = c.median_s = c.p10_s = c.p90_s = cost->mean_s / 3;
        CHECK_OK(ds_cost_table_set(table, &twin, &c));
    }
}

typedef struct pair_setup {
    ds_model_t *model;
    ds_cluster_t cluster;
    ds_strategy_t a, b;
    ds_cost_table_t *costs;
    ds_sim_options_t o;
} pair_setup_t;

static uint64_t run(ds_sim_t *sim, pair_setup_t *ps, const ds_strategy_t *s, const char *what)
{
    ds_status_t status = ds_sim_run(sim, ps->model, s, &ps->cluster, ps->costs, &ps->o);
    CHECK_MSG(status == DS_OK, "%s: %s", what, ds_last_error());
    return status == DS_OK ? hash_results(sim) : 0;
}

static int interference_kept; /* pairs whose kept graph has interference nodes */
static int64_t layers_kept; /* groups of layer nodes not repriced (only the DP algorithm changed) */
static int alike_costs;     /* pairs whose A, run after B, kept B's timeline */
static int64_t plans_kept;  /* runs that kept the last run's plan (only the DP algorithm changed) */

/* The pair's model, strategies, cluster, costs and options (as a search runs). */
static void setup_pair(const reuse_pair_t *p, pair_setup_t *ps)
{
    memset(ps, 0, sizeof(*ps));
    CHECK_OK(ds_model_load(p->model, &ps->model));
    CHECK_OK(ds_model_set_seq_len(ps->model, 256));
    setup_strategy(ps->model, p->a, p->nodes, p->per_node, &ps->a, &ps->cluster);
    setup_strategy(ps->model, p->b, p->nodes, p->per_node, &ps->b, &ps->cluster);
    CHECK_OK(ds_cluster_init(&ps->cluster, p->nodes, p->per_node, p->device));
    ps->costs =
        p->with_table ? synthetic_costs(ps->model, &ps->a, &ps->cluster, hashed_rule, NULL) : NULL;
    if (p->with_table == 2)
        add_interference(ps->costs);
    ds_sim_options_init(&ps->o);
    ps->o.granularity = (ds_sim_granularity_t)p->granularity;
    ps->o.estimate_missing = 1;
    ps->o.keep_timeline = 0; /* as a search runs */
}

static void check_pair(const reuse_pair_t *p, int *reused_count)
{
    pair_setup_t ps;
    setup_pair(p, &ps);
    ds_sim_t *kept = NULL, *fresh = NULL;
    CHECK_OK(ds_sim_create(&kept));
    CHECK_OK(ds_sim_create(&fresh));
    uint64_t a1 = run(kept, &ps, &ps.a, p->a);
    CHECK_MSG(!kept->results.reused, "%s: the first run reused a graph", p->a);
    uint64_t b_kept = run(kept, &ps, &ps.b, p->b);
    bool reused = kept->results.reused;
    /* Buckets issued during the backward that cost the compute stream. */
    for (int32_t id = 0; reused && id < kept->g.n; id++)
        if (kept->g.kind[id] == DSI_N_BWD && kept->g.label[id] == DSI_L_GRAD_ALLREDUCE) {
            interference_kept++;
            break;
        }
    uint64_t a_kept = run(kept, &ps, &ps.a, p->a);
    alike_costs += kept->results.same_timeline; /* A's durations are B's */
    CHECK_MSG(kept->results.reused == reused, "%s after %s: reused %d, B after A %d", p->a, p->b,
              kept->results.reused, reused);
    /* A third run on the graph: one node repriced per group of alike ones. */
    uint64_t b_again = run(kept, &ps, &ps.b, p->b);
    CHECK_MSG(kept->results.reused == reused, "%s after %s again: reused %d, first %d", p->b, p->a,
              kept->results.reused, reused);
    /* B once more: every duration is the last run's, so its evaluation,
     * node summary and hash are kept, not redone. */
    uint64_t b_same = run(kept, &ps, &ps.b, p->b);
    CHECK_MSG(kept->results.same_timeline, "%s after itself: the timeline was evaluated again",
              p->b);
    uint64_t b_fresh = run(fresh, &ps, &ps.b, p->b);
    CHECK_MSG(b_same == b_fresh, "%s after itself: results differ from a fresh run", p->b);
    CHECK_MSG(b_again == b_fresh, "%s after %s after %s: results differ from a fresh run", p->b,
              p->a, p->b);
    CHECK_MSG(b_kept == b_fresh, "%s after %s (graph %s): results differ from a fresh run", p->b,
              p->a, reused ? "reused" : "rebuilt");
    CHECK_MSG(a_kept == a1, "%s after %s (graph %s): results differ from its first run", p->a, p->b,
              reused ? "reused" : "rebuilt");
    if (p->reuse >= 0)
        CHECK_MSG(reused == (p->reuse == 1), "%s after %s: graph %s, expected %s", p->b, p->a,
                  reused ? "reused" : "rebuilt", p->reuse ? "reused" : "rebuilt");
    layers_kept += kept->reuse.kept_sources;
    plans_kept += kept->reuse.plans_kept;
    printf("%-4s %s after %s\n", reused ? "kept" : "new", p->b, p->a);
    *reused_count += reused;
    ds_sim_destroy(kept);
    ds_sim_destroy(fresh);
    ds_cost_table_destroy(ps.costs);
    ds_model_destroy(ps.model);
}

/* A cost changed in the table between two runs that differ in the DP
 * algorithm only: the second run must not keep the plan the first priced. */
static void check_table_change(void)
{
    const reuse_pair_t *p = &pairs[3]; /* gpt2-medium, dp-algo ring then tree, a table */
    pair_setup_t ps;
    setup_pair(p, &ps);
    ds_sim_t *kept = NULL, *fresh = NULL;
    CHECK_OK(ds_sim_create(&kept));
    CHECK_OK(ds_sim_create(&fresh));
    (void)run(kept, &ps, &ps.a, p->a);
    uint64_t b_before = run(kept, &ps, &ps.b, p->b);
    CHECK_MSG(kept->reuse.plans_kept == 1, "%s after %s: plan kept %lld times, expected once", p->b,
              p->a, (long long)kept->reuse.plans_kept);
    /* Every compute cost of the table three times what it was. */
    size_t n = ds_cost_table_size(ps.costs);
    for (size_t i = 0; i < n; i++) {
        const ds_event_key_t *key;
        const ds_cost_t *cost;
        ds_cost_table_at(ps.costs, i, &key, &cost);
        if (key->kind != DS_EVENT_COMPUTE)
            continue;
        ds_event_key_t k = *key;
        ds_cost_t c = *cost;
        c.mean_s *= 3.0;
        CHECK_OK(ds_cost_table_set(ps.costs, &k, &c));
    }
    uint64_t a_after = run(kept, &ps, &ps.a, p->a);
    CHECK_MSG(kept->reuse.plans_kept == 1, "%s after the table changed: the old plan was kept",
              p->a);
    uint64_t a_fresh = run(fresh, &ps, &ps.a, p->a);
    CHECK_MSG(a_after == a_fresh, "%s after the table changed: results differ from a fresh run",
              p->a);
    CHECK_MSG(b_before != a_fresh, "tripled compute costs changed nothing");
    ds_sim_destroy(kept);
    ds_sim_destroy(fresh);
    ds_cost_table_destroy(ps.costs);
    ds_model_destroy(ps.model);
}

int main(void)
{
    int reused = 0;
    for (size_t i = 0; i < DSI_N(pairs); i++)
        check_pair(&pairs[i], &reused);
    check_table_change();
    CHECK_MSG(plans_kept >= 3, "only %lld runs kept the last run's plan", (long long)plans_kept);
    CHECK_MSG(reused >= 5, "only %d of the pairs reused a graph", reused);
    CHECK_MSG(interference_kept >= 1, "no kept graph had interference nodes to reprice");
    CHECK_MSG(layers_kept >= 1, "no run kept its layer nodes without repricing them");
    CHECK_MSG(alike_costs >= 1, "no pair's A kept B's timeline (ZeRO-3 with another DP algorithm)");
    return check_summary("test_sim_reuse");
}
