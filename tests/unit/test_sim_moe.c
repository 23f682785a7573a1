/* Mixture of experts in the simulator, on Mixtral with short sequences and
 * synthetic costs proportional to FLOPs: the slowest expert rank is on the
 * critical path (every rank waits for it at the combine), by exactly the
 * extra work the router skew gives it; with ep = 1 there is no slowest rank;
 * memory holds each rank's share of the experts. */
#include "model/dsi_model.h"
#include "sim_support.h"

#define FLOPS_PER_S 1e14

static double flops_rule(const ds_event_key_t *key, const ds_event_t *event, void *arg)
{
    (void)arg;
    if (key->kind == DS_EVENT_COMPUTE)
        return event->flops / FLOPS_PER_S;
    return key->group == DS_GROUP_EP ? 20e-6 : 1e-6;
}

typedef struct run {
    ds_sim_summary_t sum;
    ds_sim_memory_t memory;
} run_t;

static run_t simulate_mode(ds_sim_t *sim, const ds_model_t *model, const char *text,
                           ds_sim_mode_t mode, ds_sim_device_t *slow_p, ds_sim_device_t *mean_p);

static run_t simulate(ds_sim_t *sim, const ds_model_t *model, const char *text)
{
    return simulate_mode(sim, model, text, DS_SIM_SYMMETRIC, NULL, NULL);
}

/* slow_p / mean_p: rank 0 (EP coordinate 0: the slowest of its group) and
 * rank 2 (coordinate 1). */
static run_t simulate_mode(ds_sim_t *sim, const ds_model_t *model, const char *text,
                           ds_sim_mode_t mode, ds_sim_device_t *slow_p, ds_sim_device_t *mean_p)
{
    ds_strategy_t s;
    ds_cluster_t cluster;
    setup_strategy(model, text, 2, 8, &s, &cluster);
    ds_cost_table_t *table = synthetic_costs(model, &s, &cluster, flops_rule, NULL);
    run_t r;
    memset(&r, 0, sizeof(r));
    ds_sim_options_t o;
    ds_sim_options_init(&o);
    o.mode = mode;
    ds_status_t status = ds_sim_run(sim, model, &s, &cluster, table, &o);
    CHECK_MSG(status == DS_OK, "%s: %s", text, ds_last_error());
    ds_sim_get_summary(sim, &r.sum);
    ds_sim_device_t d;
    memset(&d, 0, sizeof(d));
    CHECK_OK(ds_sim_device_of_rank(sim, 0, &d));
    r.memory = d.memory;
    if (slow_p != NULL)
        *slow_p = d;
    if (mean_p != NULL)
        CHECK_OK(ds_sim_device_of_rank(sim, 2, mean_p));
    ds_cost_table_destroy(table);
    return r;
}

/* FLOPs of one layer's expert work (forward and backward) on a rank whose
 * one expert (ep = 8 of 8 experts) gets `tokens` tokens: fc1 (2 x 14336/2
 * columns, gated), fc2, each forward and twice backward, at etp = tp = 2;
 * the activation's elementwise work. */
static double expert_flops(double tokens)
{
    double h = 4096, f = 14336 / 2.0;
    double gemms = 3.0 * (2.0 * tokens * 2.0 * f * h + 2.0 * tokens * h * f);
    double act = tokens * f * (6.0 + 10.0);
    return gemms + act;
}

int main(void)
{
    ds_sim_t *sim = NULL;
    CHECK_OK(ds_sim_create(&sim));
    ds_model_t *model = NULL;
    CHECK_OK(ds_model_load("mixtral-8x7b", &model));
    CHECK_OK(ds_model_set_seq_len(model, 256));
    /* 16 devices, tp=2 sp, ep=8: rows 128, each expert 128 x 2 x 2 x 8 / 8 =
     * 512 tokens on average, 1024 on the slowest rank with router-skew=2. */
    const char *base = "tp=2,sp,ep=8,mbs=1,gbs=8";
    char text[128];
    snprintf(text, sizeof(text), "%s,router-skew=1", base);
    run_t even = simulate(sim, model, text);
    snprintf(text, sizeof(text), "%s,router-skew=2", base);
    run_t skewed = simulate(sim, model, text);
    double m = 1, L = 32; /* gbs 8 over dp 8: one micro-batch */
    double extra = m * L * (expert_flops(1024) - expert_flops(512)) / FLOPS_PER_S;
    CHECK_NEAR(skewed.sum.iteration_s - even.sum.iteration_s, extra, 1e-6);
    CHECK(skewed.sum.iteration_s > even.sum.iteration_s);
    /* Full mode: the slowest ranks compute the extra work, the others wait
     * as long idle; the iteration is the same. */
    ds_sim_device_t slow, mean;
    run_t full = simulate_mode(sim, model, text, DS_SIM_FULL, &slow, &mean);
    CHECK_INT(to_ns(full.sum.iteration_s), to_ns(skewed.sum.iteration_s));
    CHECK_NEAR(slow.compute_s - mean.compute_s, extra, 1e-6);
    CHECK_NEAR(mean.idle_s - slow.idle_s, extra, 1e-4); /* ns roundings of the waits */
    CHECK_NEAR(full.sum.model_tflops_per_gpu, skewed.sum.model_tflops_per_gpu, 1e-12);
    /* Every device's iteration is its compute, exposed communication and
     * idle time; nothing is exposed twice (the expert gradients' reduction
     * is a collective node of its own). */
    const ds_sim_device_t *devs[] = {&slow, &mean};
    for (int i = 0; i < 2; i++) {
        CHECK(devs[i]->comm_hidden_s >= 0.0);
        CHECK_NEAR(devs[i]->compute_s + devs[i]->comm_exposed_s + devs[i]->idle_s,
                   full.sum.iteration_s, 1e-8);
    }
    /* ep=1: every rank holds all experts; the skew changes nothing. */
    run_t one = simulate(sim, model, "tp=2,sp,ep=1,mbs=1,gbs=8,router-skew=1");
    run_t one_skewed = simulate(sim, model, "tp=2,sp,ep=1,mbs=1,gbs=8,router-skew=3");
    CHECK_INT(to_ns(one.sum.iteration_s), to_ns(one_skewed.sum.iteration_s));
    /* Weights: ep=4 holds two experts per rank where ep=8 holds one (each
     * split over etp = 2): the difference is one expert's half per layer. */
    run_t four = simulate(sim, model, "tp=2,sp,ep=4,mbs=1,gbs=8,router-skew=1");
    double expert_half = 3.0 * 4096 * 14336 / 2;
    CHECK_NEAR(four.memory.weights_B - even.memory.weights_B, L * expert_half * 2.0, 1e-12);
    /* Gradients (fp32) and Adam states (12 bytes, not sharded without ZeRO)
     * follow. */
    CHECK_NEAR(four.memory.grads_B - even.memory.grads_B, L * expert_half * 4.0, 1e-12);
    CHECK_NEAR(four.memory.optimizer_B - even.memory.optimizer_B, L * expert_half * 12.0, 1e-12);
    /* cp=2 with ep=8 on the same 16 devices: dp=4, the EP group spans the
     * context-parallel ranks (tp x cp x dp = 16 = ep x etp).  A rank holds
     * half the rows (64), so each expert gets 256 tokens on average, 512
     * with router-skew=2; the weights are those of cp=1, ep=8. */
    run_t cp_even = simulate(sim, model, "tp=2,sp,cp=2,flash,ep=8,mbs=1,gbs=4,router-skew=1");
    run_t cp_skewed = simulate(sim, model, "tp=2,sp,cp=2,flash,ep=8,mbs=1,gbs=4,router-skew=2");
    double cp_extra = L * (expert_flops(512) - expert_flops(256)) / FLOPS_PER_S;
    /* within the ns roundings of 32 layers' operators */
    CHECK_NEAR(cp_skewed.sum.iteration_s - cp_even.sum.iteration_s, cp_extra, 1e-5);
    CHECK_NEAR(cp_even.memory.weights_B, even.memory.weights_B, 1e-12);
    /* Every activation is per token, the experts' and router's too: half
     * of cp=1's with fused attention. */
    run_t flash = simulate(sim, model, "tp=2,sp,flash,ep=8,mbs=1,gbs=8,router-skew=1");
    CHECK_NEAR(cp_even.memory.activations_B, 0.5 * flash.memory.activations_B, 1e-12);
    /* fp8: the experts' weights get TE's FP8 copy and transpose (2 bytes a
     * parameter) beside the attention linears' (h (q + 2 kv) + q h, / tp);
     * the experts' fc1 and fc2 inputs (512 tokens of h and of f / etp) are
     * kept in one byte, less than the dense part saves besides. */
    run_t fp8 = simulate(sim, model, "tp=2,sp,flash,fp8=hybrid,ep=8,mbs=1,gbs=8,router-skew=1");
    double attention_linears = (4096.0 * (4096 + 2 * 1024) + 4096.0 * 4096) / 2;
    CHECK_NEAR(fp8.memory.weights_B - flash.memory.weights_B,
               L * 2.0 * (expert_half + attention_linears), 1e-12);
    CHECK(flash.memory.activations_B - fp8.memory.activations_B > L * 512.0 * (4096 + 14336 / 2));
    ds_model_destroy(model);
    ds_sim_destroy(sim);
    return check_summary("test_sim_moe");
}
