/*
 * Perfetto / Chrome trace of the reported iteration (JSON trace event
 * format): one process per node, one thread (track) per device and stream,
 * complete events ("ph": "X") in microseconds from the iteration start.
 * Events of one track never overlap: each stream runs in program order.
 */
#include "dsi_sim.h"

#include <stdlib.h>
#include <string.h>

static void json_escape(FILE *out, const char *text)
{
    fputc('"', out);
    for (const unsigned char *c = (const unsigned char *)text; *c != '\0'; c++) {
        if (*c == '"' || *c == '\\')
            fprintf(out, "\\%c", *c);
        else if (*c < 0x20)
            fprintf(out, "\\u%04x", *c);
        else
            fputc(*c, out);
    }
    fputc('"', out);
}

/* Track id of (device, stream): unique inside the node's process. */
static int64_t track_of(const ds_sim_t *sim, int64_t rank, int stream)
{
    int64_t local = rank % sim->cluster.gpus_per_node;
    return local * (DS_SIM_STREAM_COUNT_ + 1) + stream;
}

static void layer_name(const ds_sim_t *sim, const ds_sim_event_t *e, char *text, size_t size)
{
    const char *pass = e->category == DS_SIM_CAT_FORWARD ? "fwd" : "bwd";
    if (e->num_layers > 1) {
        snprintf(text, size, "%s chunk %d (%d parts) mb %d", pass, e->chunk, e->num_layers,
                 e->microbatch);
        return;
    }
    if (e->layer == DSI_PART_EMBEDDING)
        snprintf(text, size, "%s embedding mb %d", pass, e->microbatch);
    else if (e->layer == DSI_PART_HEAD)
        snprintf(text, size, "%s head mb %d", pass, e->microbatch);
    else
        snprintf(text, size, "%s layer %d mb %d", pass, e->layer, e->microbatch);
    (void)sim;
}

static void emit(FILE *out, bool *first, int64_t pid, int64_t tid, const char *name,
                 const char *cat, double ts_us, double dur_us, const char *args)
{
    fprintf(
        out,
        "%s\n{\"ph\": \"X\", \"pid\": %lld, \"tid\": %lld, \"ts\": %.3f, \"dur\": %.3f, \"name\": ",
        *first ? "" : ",", (long long)pid, (long long)tid, ts_us, dur_us);
    json_escape(out, name);
    fprintf(out, ", \"cat\": \"%s\"", cat);
    if (args != NULL && args[0] != '\0')
        fprintf(out, ", \"args\": {%s}", args);
    fputc('}', out);
    *first = false;
}

/* Operators of a layer node, laid out from its start. */
static void emit_ops(ds_sim_t *sim, FILE *out, bool *first, int64_t rank, const ds_sim_event_t *e,
                     int64_t origin)
{
    const dsi_graph_t *g = &sim->g;
    int32_t id = (int32_t)e->id;
    int32_t lane, dp;
    dsi_sim_locate(sim, rank, &lane, &dp);
    const dsi_lane_t *l = &sim->plan.lanes[lane];
    const dsi_profile_t *pr = &sim->profiles[l->prof];
    int64_t pid = rank / sim->cluster.gpus_per_node;
    int64_t at = e->start_ns, end = e->end_ns;
    bool fwd = e->category == DS_SIM_CAT_FORWARD;
    const dsi_pass_node_t *pn = &g->payload[id].pass;
    for (int k = 0; k < pn->nparts; k++) {
        /* A fused backward runs its parts in reverse. */
        int index = pn->nparts == 1 ? pn->part0 : fwd ? k : pn->nparts - 1 - k;
        int32_t part = pr->part_first[pn->chunk] + index;
        const dsi_template_t *t = &sim->templates[fwd ? sim->part_tf[part] : sim->part_tb[part]];
        int32_t op0 = pn->op1 > 0 ? pn->op0 : 0, op1 = pn->op1 > 0 ? pn->op1 : t->op_count;
        for (int32_t i = op0; i < op1; i++) {
            int32_t o = t->op_first + i;
            int64_t d = sim->op_comm[o] ? sim->op_dur[o]
                                        : (int64_t)((double)sim->op_dur[o] * l->factor + 0.5);
            int64_t b = DSI_MIN(at + d, end);
            char args[96];
            snprintf(args, sizeof(args), "\"mb\": %d, \"layer\": %d", e->microbatch,
                     sim->part_layer[part]);
            emit(out, first, pid,
                 track_of(sim, rank, sim->op_comm[o] ? DS_SIM_STREAM_TP : DS_SIM_STREAM_COMPUTE),
                 sim->op_label[o], sim->op_comm[o] ? "tp-comm" : ds_sim_category_name(e->category),
                 (double)(at - origin) / 1e3, (double)(b - at) / 1e3, args);
            at = b;
        }
    }
}

static int compare_rank(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Names and order of the tracks of `rank` with something in the reported
 * iteration (with `detail`, the TP track of its layers' collectives too). */
static void emit_tracks(ds_sim_t *sim, FILE *out, int64_t rank, const ds_sim_event_t *events,
                        size_t count, bool detail)
{
    const ds_strategy_t *s = &sim->s;
    int64_t node = rank / sim->cluster.gpus_per_node;
    /* Tracks with something in the reported iteration get a name. */
    bool used[DS_SIM_STREAM_COUNT_] = {false};
    for (size_t i = 0; i < count; i++)
        if (events[i].iteration == 2)
            used[events[i].stream] = true;
    if (detail)
        used[DS_SIM_STREAM_TP] |= s->tp > 1;
    ds_coords_t c = ds_strategy_coords_of(s, rank);
    for (int st = 0; st < DS_SIM_STREAM_COUNT_; st++) {
        if (!used[st])
            continue;
        fprintf(out,
                ",\n{\"ph\": \"M\", \"pid\": %lld, \"tid\": %lld, \"name\": \"thread_name\", "
                "\"args\": {\"name\": \"gpu %lld rank %lld (tp %d dp %d pp %d) %s\"}}",
                (long long)node, (long long)track_of(sim, rank, st),
                (long long)(rank % sim->cluster.gpus_per_node), (long long)rank, c.tp, c.dp, c.pp,
                ds_sim_stream_name((ds_sim_stream_t)st));
        fprintf(out,
                ",\n{\"ph\": \"M\", \"pid\": %lld, \"tid\": %lld, \"name\": \"thread_sort_index\", "
                "\"args\": {\"sort_index\": %lld}}",
                (long long)node, (long long)track_of(sim, rank, st),
                (long long)track_of(sim, rank, st));
    }
}

/* The events of `rank` in the reported iteration, operator by operator for
 * layer passes with `detail`. */
static void emit_events(ds_sim_t *sim, FILE *out, bool *first, int64_t rank,
                        const ds_sim_event_t *events, size_t count, bool detail, int64_t origin)
{
    int64_t node = rank / sim->cluster.gpus_per_node;
    for (size_t i = 0; i < count; i++) {
        const ds_sim_event_t *e = &events[i];
        if (e->iteration != 2)
            continue;
        char name[128], args[256];
        bool layer = e->category == DS_SIM_CAT_FORWARD || e->category == DS_SIM_CAT_BACKWARD;
        if (detail && layer) {
            emit_ops(sim, out, first, rank, e, origin);
            continue;
        }
        if (layer) {
            layer_name(sim, e, name, sizeof(name));
            snprintf(args, sizeof(args),
                     "\"mb\": %d, \"chunk\": %d, \"compute_us\": %.3f, \"tp_us\": %.3f%s",
                     e->microbatch, e->chunk, (double)e->compute_ns / 1e3,
                     (double)(e->end_ns - e->start_ns - e->compute_ns) / 1e3,
                     e->assumed ? ", \"provenance\": \"assumed\"" : "");
        } else if (e->stream == DS_SIM_STREAM_PP) {
            snprintf(name, sizeof(name), "p2p (%d transfer%s)", e->num_layers + 1,
                     e->num_layers ? "s" : "");
            snprintf(args, sizeof(args), "%s", e->assumed ? "\"provenance\": \"assumed\"" : "");
        } else if (e->stream == DS_SIM_STREAM_DP && e->bucket >= 0) {
            snprintf(name, sizeof(name), "%s %d", e->name, e->bucket);
            snprintf(args, sizeof(args), "\"bucket\": %d%s", e->bucket,
                     e->assumed ? ", \"provenance\": \"assumed\"" : "");
        } else {
            snprintf(name, sizeof(name), "%s", e->name);
            snprintf(args, sizeof(args), "%s", e->assumed ? "\"provenance\": \"assumed\"" : "");
        }
        emit(out, first, node, track_of(sim, rank, e->stream), name,
             ds_sim_category_name(e->category), (double)(e->start_ns - origin) / 1e3,
             (double)(e->end_ns - e->start_ns) / 1e3, args);
    }
}

ds_status_t ds_sim_write_trace(ds_sim_t *sim, const char *path, const int64_t *ranks,
                               size_t num_ranks, const int64_t *detail_ranks, size_t num_detail)
{
    if (!sim->results.evaluated)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "no simulation has run on this simulator");
    const ds_strategy_t *s = &sim->s;
    ds_status_t status = DS_OK;
    int64_t *list = NULL;
    size_t n = num_ranks;
    if (ranks == NULL || num_ranks == 0) {
        n = (size_t)s->tp * s->pp;
        DSI_TRY(dsi_malloc(n * sizeof(*list), &list));
        size_t k = 0;
        for (int p = 0; p < s->pp; p++)
            for (int t = 0; t < s->tp; t++)
                list[k++] = ds_strategy_rank_of(s, (ds_coords_t){t, 0, p});
    } else {
        DSI_TRY(dsi_malloc(n * sizeof(*list), &list));
        memcpy(list, ranks, n * sizeof(*list));
    }
    qsort(list, n, sizeof(*list), compare_rank);
    FILE *out = fopen(path, "w");
    if (out == NULL) {
        status = DSI_ERROR(DS_ERR_IO, "cannot write the trace '%s'", path);
        goto out;
    }
    int64_t origin = sim->results.it2_begin;
    fprintf(
        out,
        "{\"displayTimeUnit\": \"ns\", \"otherData\": {\"iteration_s\": %.9g, \"origin_ns\": %lld, "
        "\"assumed_share\": %.6f},\n\"traceEvents\": [",
        sim->results.summary.iteration_s, (long long)origin, sim->results.summary.assumed_share);
    bool first = true;
    int64_t last_node = -1;
    for (size_t r = 0; r < n && status == DS_OK; r++) {
        int64_t rank = list[r];
        if (r > 0 && rank == list[r - 1])
            continue;
        int64_t node = rank / sim->cluster.gpus_per_node;
        if (node != last_node) {
            fprintf(out,
                    "%s\n{\"ph\": \"M\", \"pid\": %lld, \"name\": \"process_name\", \"args\": "
                    "{\"name\": \"node %lld\"}}",
                    first ? "" : ",", (long long)node, (long long)node);
            fprintf(out,
                    ",\n{\"ph\": \"M\", \"pid\": %lld, \"name\": \"process_sort_index\", \"args\": "
                    "{\"sort_index\": %lld}}",
                    (long long)node, (long long)node);
            first = false;
            last_node = node;
        }
        bool detail = false;
        for (size_t i = 0; i < num_detail && detail_ranks != NULL; i++)
            detail |= detail_ranks[i] == rank;
        const ds_sim_event_t *events;
        size_t count;
        status = ds_sim_device_events(sim, rank, &events, &count);
        if (status != DS_OK)
            break;
        emit_tracks(sim, out, rank, events, count, detail);
        emit_events(sim, out, &first, rank, events, count, detail, origin);
    }
    fprintf(out, "\n]}\n");
    if (fclose(out) != 0 && status == DS_OK)
        status = DSI_ERROR(DS_ERR_IO, "writing the trace '%s' failed", path);
out:
    dsi_free(list);
    return status;
}
