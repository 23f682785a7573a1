/* Closed forms of pipeline schedules with uniform stages and free
 * communication: GPipe and 1F1B take (m + p - 1)(tf + tb) with a bubble of
 * (p - 1)/(m + p - 1); interleaving with v chunks divides the bubble by v;
 * gradient sync hides under the backward when overlap is on. */
#include "sim_support.h"

#define FWD_NS 3000 /* per layer */
#define BWD_NS 5000 /* per layer: dgrad + wgrad */

typedef struct rule_arg {
    double dp_allreduce_s; /* per DP bucket collective */
} rule_arg_t;

static double uniform_rule(const ds_event_key_t *key, const ds_event_t *event, void *arg)
{
    const rule_arg_t *r = arg;
    (void)event;
    if (key->kind == DS_EVENT_COMPUTE && key->op == DS_OP_GEMM)
        return key->pass == DS_PASS_FORWARD ? FWD_NS * 1e-9 : BWD_NS * 0.5e-9;
    if (key->kind == DS_EVENT_COMM && key->group == DS_GROUP_DP)
        return r != NULL ? r->dp_allreduce_s : 0.0;
    return 0.0;
}

static void run(ds_sim_t *sim, const ds_model_t *model, const char *text, int devices,
                const rule_arg_t *arg, ds_sim_granularity_t granularity, ds_sim_summary_t *sum)
{
    ds_strategy_t s;
    ds_cluster_t cluster;
    setup_strategy(model, text, 1, devices, &s, &cluster);
    ds_cost_table_t *costs = synthetic_costs(model, &s, &cluster, uniform_rule, (void *)arg);
    ds_sim_options_t o;
    ds_sim_options_init(&o);
    o.granularity = granularity;
    ds_status_t status = ds_sim_run(sim, model, &s, &cluster, costs, &o);
    CHECK_MSG(status == DS_OK, "%s: %s", text, ds_last_error());
    ds_sim_get_summary(sim, sum);
    ds_cost_table_destroy(costs);
}

static void pipelines(ds_sim_t *sim)
{
    static const char *const schedules[] = {"gpipe", "1f1b"};
    static const int pps[] = {1, 2, 4, 8};
    static const int ms[] = {1, 3, 8, 17};
    ds_model_t *model = uniform_model(8, 1);
    for (int g = 0; g < 2; g++)
        for (size_t i = 0; i < DSI_N(schedules); i++)
            for (size_t j = 0; j < DSI_N(pps); j++)
                for (size_t k = 0; k < DSI_N(ms); k++) {
                    int p = pps[j], m = ms[k];
                    char text[128];
                    snprintf(text, sizeof(text), "dp=1,pp=%d,mbs=1,gbs=%d,schedule=%s", p, m,
                             schedules[i]);
                    ds_sim_summary_t sum;
                    run(sim, model, text, p, NULL, (ds_sim_granularity_t)g, &sum);
                    int64_t per_stage = (int64_t)(8 / p) * (FWD_NS + BWD_NS);
                    int64_t expected = (int64_t)(m + p - 1) * per_stage;
                    CHECK_MSG(to_ns(sum.iteration_s) == expected,
                              "%s (%s level): %lld ns, expected %lld", text, g ? "stage" : "layer",
                              (long long)to_ns(sum.iteration_s), (long long)expected);
                    CHECK_NEAR(sum.bubble_fraction + 1.0, 1.0 + (double)(p - 1) / (m + p - 1),
                               1e-9);
                    CHECK_NEAR(sum.compute_s, (double)m * per_stage * 1e-9, 1e-9);
                }
    ds_model_destroy(model);
}

static void interleaved(ds_sim_t *sim)
{
    /* pp = 4 stages of 8 layers each; v chunks per stage.  Bubble time
     * (p - 1)(tf + tb) / v with tf, tb the whole stage's times. */
    ds_model_t *model = uniform_model(32, 1);
    int p = 4;
    int64_t stage = 8 * (int64_t)(FWD_NS + BWD_NS);
    static const int ms[] = {4, 8, 12};
    for (size_t k = 0; k < DSI_N(ms); k++) {
        int m = ms[k];
        for (int v = 1; v <= 8; v *= 2) {
            char text[128];
            snprintf(text, sizeof(text), "dp=1,pp=%d,mbs=1,gbs=%d,%s%d", p, m,
                     v > 1 ? "vpp=" : "schedule=1f1b,vpp=", v);
            ds_sim_summary_t sum;
            run(sim, model, text, p, NULL, DS_SIM_LAYER, &sum);
            int64_t bubble = to_ns(sum.iteration_s) - m * stage;
            int64_t expected = (int64_t)(p - 1) * stage / v;
            CHECK_MSG(bubble == expected, "%s: bubble %lld ns, expected (p-1)(tf+tb)/v = %lld",
                      text, (long long)bubble, (long long)expected);
            CHECK_NEAR(sum.bubble_fraction, (double)expected / (double)(m * stage + expected),
                       1e-9);
        }
    }
    ds_model_destroy(model);
}

int main(void)
{
    ds_sim_t *sim = NULL;
    CHECK_OK(ds_sim_create(&sim));
    pipelines(sim);
    interleaved(sim);
    ds_sim_destroy(sim);
    return check_summary("test_sim_closed_form");
}
