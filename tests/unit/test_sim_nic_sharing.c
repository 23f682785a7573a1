/* Gradient buckets reduced during the backward share the network interfaces
 * with the layer passes' transfers that leave the node after them (here
 * the context-parallel ring of a cp=2 pair on two nodes): the bucket
 * stream carries their whole time, hidden or not; inside a node, or with
 * the option off, nothing changes. */
#include "sim_support.h"

#define COMPUTE_NS 1000
#define RING_NS 3000
#define BUCKET_NS 1000000

static double rule(const ds_event_key_t *key, const ds_event_t *event, void *arg)
{
    (void)event;
    (void)arg;
    if (key->kind == DS_EVENT_COMPUTE)
        return COMPUTE_NS * 1e-9;
    if (key->group == DS_GROUP_CP && key->op == DS_COMM_SENDRECV)
        return RING_NS * 1e-9;
    if (key->group == DS_GROUP_DP)
        return BUCKET_NS * 1e-9;
    return 0.0;
}

typedef struct run {
    int64_t iteration_ns, shared_ns;
    size_t shared_events;
} run_t;

static run_t simulate(ds_sim_t *sim, const ds_model_t *model, int64_t nodes, int per_node,
                      int sharing)
{
    ds_strategy_t s;
    ds_cluster_t cluster;
    setup_strategy(model, "dp=2,cp=2,tp=1,pp=1,flash,mbs=1,gbs=4", nodes, per_node, &s, &cluster);
    ds_cost_table_t *table = synthetic_costs(model, &s, &cluster, rule, NULL);
    ds_sim_options_t o;
    ds_sim_options_init(&o);
    CHECK_INT(o.nic_sharing, 1);
    o.nic_sharing = sharing;
    CHECK_OK(ds_sim_run(sim, model, &s, &cluster, table, &o));
    ds_sim_summary_t sum;
    ds_sim_get_summary(sim, &sum);
    run_t r = {to_ns(sum.iteration_s), 0, 0};
    const ds_sim_event_t *events = NULL;
    size_t count = 0;
    CHECK_OK(ds_sim_device_events(sim, 0, &events, &count));
    for (size_t i = 0; i < count; i++)
        if (events[i].iteration == 2 && strcmp(events[i].name, "dp.nic-shared") == 0) {
            r.shared_ns += events[i].end_ns - events[i].start_ns;
            r.shared_events++;
        }
    ds_cost_table_destroy(table);
    return r;
}

int main(void)
{
    ds_model_t *model = NULL;
    CHECK_OK(ds_model_load("llama3-8b", &model));
    CHECK_OK(ds_model_set_seq_len(model, 4096));
    ds_sim_t *sim = NULL;
    CHECK_OK(ds_sim_create(&sim));
    int layers = 32;

    /* One device per node: the ring's pair is on two nodes.  The output
     * layer's backward, first, completes buckets, so every ring transfer
     * of the last backward after it (cp=2: K/V out, their gradients back,
     * the last hop home; three per layer) shares the interfaces. */
    run_t off = simulate(sim, model, 4, 1, 0);
    CHECK_INT(off.shared_events, 0);
    run_t on = simulate(sim, model, 4, 1, 1);
    CHECK_INT(on.shared_ns, (int64_t)layers * 3 * RING_NS);
    CHECK(on.shared_events > 0);
    /* The buckets' stream is what ends the iteration: it ends that much later. */
    CHECK_INT(on.iteration_ns - off.iteration_ns, on.shared_ns);

    /* The pair inside one node: no interface shared. */
    run_t inside_off = simulate(sim, model, 1, 4, 0);
    run_t inside = simulate(sim, model, 1, 4, 1);
    CHECK_INT(inside.shared_events, 0);
    CHECK_INT(inside.iteration_ns, inside_off.iteration_ns);

    ds_sim_destroy(sim);
    ds_model_destroy(model);
    return check_summary("test_sim_nic_sharing");
}
