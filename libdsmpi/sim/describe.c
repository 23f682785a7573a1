/*
 * Readable descriptions of graph nodes for messages (deadlock cycles,
 * critical-path ends): the device, the event and its place in the schedule.
 */
#include "dsi_sim.h"

#include <stdio.h>

static const char *const dir_names[4] = {"send-forward", "receive-forward", "send-backward",
                                         "receive-backward"};

/* Index of the action of `lane` that posts its `seq`-th transfer in `dir`. */
static int32_t action_of_transfer(const ds_sim_t *sim, int32_t lane, dsi_dir_t dir, int32_t seq)
{
    const dsi_program_t *prog = &sim->plan.programs[sim->plan.lanes[lane].p];
    int32_t count = 0;
    for (int32_t i = 0; i < prog->count; i++)
        for (int j = 0; j < prog->actions[i].nx; j++)
            if (prog->actions[i].x[j] == dir && count++ == seq)
                return i;
    return -1;
}

static void describe_position(const ds_sim_t *sim, int32_t lane, int32_t action, char *text,
                              size_t size)
{
    const dsi_program_t *prog = &sim->plan.programs[sim->plan.lanes[lane].p];
    /* The compute pass just before the call. */
    int32_t i = action;
    while (i >= 0 && prog->actions[i].type == DSI_ACT_COMM)
        i--;
    if (i < 0)
        snprintf(text, size, "call %d of the schedule, before any pass", action);
    else
        snprintf(text, size, "call %d of the schedule, after %s of micro-batch %d chunk %d", action,
                 prog->actions[i].type == DSI_ACT_FWD ? "the forward" : "the backward",
                 prog->actions[i].mb, prog->actions[i].chunk);
}

void dsi_sim_describe_node(const ds_sim_t *sim, int32_t id, char *text, size_t size)
{
    const dsi_graph_t *g = &sim->g;
    int32_t owner = g->owner[id];
    int64_t place[4];
    dsi_node_place(g, id, place);
    switch ((dsi_node_kind_t)g->kind[id]) {
    case DSI_N_FWD:
    case DSI_N_BWD:
    case DSI_N_OPT:
    case DSI_N_TP:
    case DSI_N_JOIN: {
        const dsi_lane_t *l = &sim->plan.lanes[owner];
        snprintf(text, size, "stage %d (ranks from %lld) %s mb %d chunk %d, iteration %d", l->p,
                 (long long)dsi_sim_lane_rank(sim, owner, 0),
                 g->kind[id] == DSI_N_FWD   ? "forward"
                 : g->kind[id] == DSI_N_BWD ? "backward"
                 : g->kind[id] == DSI_N_OPT ? "optimizer"
                 : g->kind[id] == DSI_N_TP  ? "sp-norm allreduce"
                                            : "wait",
                 (int)place[0], (int)place[1], g->iter[id]);
        return;
    }
    case DSI_N_XFER: {
        const dsi_lane_t *l = &sim->plan.lanes[owner];
        int ch = g->payload[id].xfer.channel, seq = g->payload[id].xfer.seq;
        int32_t peer = ch == 0 ? l->next : l->prev;
        dsi_dir_t send_dir = ch == 0 ? DSI_SEND_NEXT : DSI_SEND_PREV;
        dsi_dir_t recv_dir = ch == 0 ? DSI_RECV_PREV : DSI_RECV_NEXT;
        char from[160] = "", to[160] = "";
        describe_position(sim, owner, action_of_transfer(sim, owner, send_dir, seq), from,
                          sizeof(from));
        if (peer >= 0)
            describe_position(sim, peer, action_of_transfer(sim, peer, recv_dir, seq), to,
                              sizeof(to));
        snprintf(text, size,
                 "%s #%d of iteration %d from stage %d (rank %lld, %s) to stage %d (rank %lld, %s)",
                 dir_names[send_dir], seq, g->iter[id], l->p,
                 (long long)dsi_sim_lane_rank(sim, owner, 0), from,
                 peer >= 0 ? sim->plan.lanes[peer].p : -1,
                 peer >= 0 ? (long long)dsi_sim_lane_rank(sim, peer, 0) : -1LL, to);
        (void)recv_dir;
        return;
    }
    case DSI_N_DP:
        snprintf(text, size, "%s bucket %d of the data-parallel group of stage %d, iteration %d",
                 dsi_node_labels[g->label[id]], (int)place[0], sim->plan.dpgroups[owner].p,
                 g->iter[id]);
        return;
    case DSI_N_COL:
        snprintf(text, size, "%s of replica %d, iteration %d", dsi_node_labels[g->label[id]],
                 sim->plan.columns[owner].d, g->iter[id]);
        return;
    case DSI_N_KIND_COUNT_: break;
    }
    snprintf(text, size, "event %d", id);
}
