/*
 * One iteration built, evaluated twice.  A symmetric run without a timeline
 * (a search's) needs of the second iteration only its span, node sums and
 * timeline hash, and the second iteration's graph is the first one's again:
 * the builder carries from one iteration to the next only node indexes
 * (each lane's stream, each DP instance's stream, the parameter gathers
 * ZeRO-1/2 waits for).  So the graph holds one iteration after one JOIN
 * node per carried slot ("carry nodes", at the start of the node array),
 * which the builder finds in those slots where an iteration after the
 * first finds the previous iteration's nodes.  The first evaluation, carry
 * nodes at 0, gives iteration 1's timeline (a carry node's edges then
 * change no start); the second, each carry node starting where the nodes
 * the builder left in its slot ended in the first, gives iteration 2's.
 *
 * The one difference in what is built: iteration 1 builds a chunk's first
 * forward as one node where a later iteration splits it into its parts to
 * wait for the gathers (stage level, ZeRO-1/2 with overlap).  Its parts end
 * where the fused node would (its duration is their sum); the timeline
 * hash counts them as the fused node in iteration 1 (fused_first/count).
 */
#include "dsi_phase.h"

#include <string.h>

bool dsi_twice_applies(const ds_sim_t *sim)
{
    return sim->opt.mode == DS_SIM_SYMMETRIC && !sim->opt.keep_timeline &&
           sim->device_factor == NULL && dsi_param_int(DSI_PARAM_SIM_ONE_ITERATION) != 0;
}

/* ZeRO-1/2 with overlap: a chunk's first forward waits for the gathers
 * after the previous optimizer step (phase_pipeline.c's gather_wait). */
static bool gathers_carried(const ds_sim_t *sim)
{
    const ds_strategy_t *s = &sim->s;
    return (s->zero == 1 || s->zero == 2) && s->dp > 1 && s->overlap_grad_reduce;
}

static ds_status_t carry_node(ds_sim_t *sim, int32_t owner, int32_t *slot)
{
    int32_t id;
    DSI_TRY(dsi_build_node(sim, DSI_N_JOIN, 1, owner, 0, &id));
    *slot = id;
    return DS_OK;
}

ds_status_t dsi_twice_begin(ds_sim_t *sim)
{
    dsi_sim_twice_t *tw = &sim->twice;
    dsi_sim_builder_t *bd = &sim->builder;
    tw->num_fused = 0;
    tw->num_carry = 0;
    for (int32_t lane = 0; lane < sim->plan.num_lanes; lane++) {
        DSI_TRY(carry_node(sim, lane, &bd->cursors[lane].last));
        bd->cursors[lane].npend = 0;
    }
    for (int32_t g = 0; g < sim->plan.num_dpgroups; g++)
        DSI_TRY(carry_node(sim, g, &bd->dp_last[g]));
    if (gathers_carried(sim))
        for (int32_t g = 0; g < sim->plan.num_dpgroups; g++)
            for (int32_t k = 0; k < sim->plan.num_buckets[sim->plan.dpgroups[g].p]; k++)
                DSI_TRY(carry_node(sim, g, &bd->gather[(size_t)g * sim->plan.max_buckets + k]));
    tw->num_carry = sim->g.n;
    return DS_OK;
}

ds_status_t dsi_twice_note_fused(ds_sim_t *sim, int32_t first, int32_t count)
{
    dsi_sim_twice_t *tw = &sim->twice;
    if (tw->num_fused == tw->fused_cap) {
        int32_t cap = tw->fused_cap ? 2 * tw->fused_cap : 64;
        DSI_TRY(dsi_realloc_array(&tw->fused_first, (size_t)cap, sizeof(*tw->fused_first)));
        DSI_TRY(dsi_realloc_array(&tw->fused_count, (size_t)cap, sizeof(*tw->fused_count)));
        tw->fused_cap = cap;
    }
    tw->fused_first[tw->num_fused] = first;
    tw->fused_count[tw->num_fused++] = count;
    return DS_OK;
}

static ds_status_t add_from(dsi_sim_twice_t *tw, int32_t *count, int32_t node)
{
    if (node < 0)
        return DS_OK;
    if (*count == tw->from_cap) {
        int32_t cap = tw->from_cap ? 2 * tw->from_cap : 256;
        DSI_TRY(dsi_realloc_array(&tw->from, (size_t)cap, sizeof(*tw->from)));
        tw->from_cap = cap;
    }
    tw->from[(*count)++] = node;
    return DS_OK;
}

/* What the builder left in each carried slot, in the carry nodes' order. */
ds_status_t dsi_twice_end(ds_sim_t *sim)
{
    dsi_sim_twice_t *tw = &sim->twice;
    const dsi_sim_builder_t *bd = &sim->builder;
    if (tw->carry_cap < tw->num_carry) {
        DSI_TRY(dsi_realloc_array(&tw->from_off, (size_t)tw->num_carry + 1, sizeof(*tw->from_off)));
        DSI_TRY(
            dsi_realloc_array(&tw->carry_start, (size_t)tw->num_carry, sizeof(*tw->carry_start)));
        tw->carry_cap = tw->num_carry;
    }
    int32_t c = 0, count = 0;
    for (int32_t lane = 0; lane < sim->plan.num_lanes; lane++, c++) {
        const dsi_lane_cursor_t *l = &bd->cursors[lane];
        tw->from_off[c] = count;
        if (l->npend == 0)
            DSI_TRY(add_from(tw, &count, l->last));
        for (int32_t i = 0; i < l->npend; i++)
            DSI_TRY(add_from(tw, &count, l->pend[i]));
    }
    for (int32_t g = 0; g < sim->plan.num_dpgroups; g++, c++) {
        tw->from_off[c] = count;
        DSI_TRY(add_from(tw, &count, bd->dp_last[g]));
    }
    if (gathers_carried(sim))
        for (int32_t g = 0; g < sim->plan.num_dpgroups; g++)
            for (int32_t k = 0; k < sim->plan.num_buckets[sim->plan.dpgroups[g].p]; k++, c++) {
                tw->from_off[c] = count;
                DSI_TRY(add_from(tw, &count, bd->gather[(size_t)g * sim->plan.max_buckets + k]));
            }
    if (c != tw->num_carry)
        return DSI_ERROR(DS_ERR_INTERNAL, "%d carried slots for %d carry nodes", c, tw->num_carry);
    tw->from_off[c] = count;
    return DS_OK;
}

ds_status_t dsi_twice_second(ds_sim_t *sim)
{
    dsi_sim_twice_t *tw = &sim->twice;
    dsi_graph_t *g = &sim->g;
    if (tw->start1_cap < g->n) {
        DSI_TRY(dsi_realloc_array(&tw->start1, (size_t)g->n, sizeof(*tw->start1)));
        tw->start1_cap = g->n;
    }
    memcpy(tw->start1, g->start, (size_t)g->n * sizeof(*g->start));
    for (int32_t c = 0; c < tw->num_carry; c++) {
        int64_t latest = 0;
        for (int32_t i = tw->from_off[c]; i < tw->from_off[c + 1]; i++) {
            int32_t u = tw->from[i];
            latest = DSI_MAX(latest, g->start[u] + g->dur[u]); /* the sweep checked the sum */
        }
        tw->carry_start[c] = latest;
    }
    return dsi_graph_sweep(g, tw->carry_start, tw->num_carry);
}

void dsi_twice_free(dsi_sim_twice_t *tw)
{
    dsi_free(tw->from_off);
    dsi_free(tw->from);
    dsi_free(tw->carry_start);
    dsi_free(tw->start1);
    dsi_free(tw->fused_first);
    dsi_free(tw->fused_count);
    memset(tw, 0, sizeof(*tw));
}
