/*
 * Perfetto / Chrome trace of the measured iterations of a run: process 0,
 * one track per rank for its compute operators and one for its
 * communication calls, microseconds from the iteration's first event.
 */
#include "dsi_exec.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const kind_names[DSI_XK_COUNT_] = {
    "compute",    "tp",         "p2p",       "dp.start", "dp.test",
    "dp.wait",    "tp.sp-norm", "embedding", "mp",       "optimizer",
    "dp.overlap", "cp",         "cp.post",   "ep",       "edp",
};

/* The layer (or part) at index `part` of chunk `chunk` on pipeline rank `stage`. */
static int layer_of_part(const ds_exec_t *x, int stage, int chunk, int part)
{
    int first, n;
    ds_strategy_chunk_layers(&x->s, x->model->info.num_layers, stage, chunk, &first, &n);
    int embed = stage == 0 && chunk == 0;
    if (embed && part == 0)
        return DSI_PART_EMBEDDING;
    int index = part - embed;
    return index < n ? first + index : DSI_PART_HEAD;
}

static void name_of(const ds_exec_t *x, const dsi_xrec_t *r, char *text, size_t size, char *key,
                    size_t key_size)
{
    key[0] = '\0';
    bool in_pass = r->kind == DSI_XK_COMPUTE || r->kind == DSI_XK_TP || r->kind == DSI_XK_CP_POST ||
                   r->kind == DSI_XK_EP || (r->kind == DSI_XK_CP && r->part >= 0);
    if (!in_pass) {
        if (r->kind == DSI_XK_DP_START || r->kind == DSI_XK_DP_WAIT || r->kind == DSI_XK_DP_OVERLAP)
            snprintf(text, size, "%s bucket %d", kind_names[r->kind], r->mb);
        else if (r->kind == DSI_XK_P2P)
            snprintf(text, size, "p2p (%d transfers)", r->nx);
        else
            snprintf(text, size, "%s", kind_names[r->kind]);
        return;
    }
    ds_coords_t c = ds_strategy_coords_of(&x->s, r->rank);
    int layer = layer_of_part(x, c.pp, r->chunk, r->part);
    dsi_op_t ops[DSI_MAX_LAYER_OPS];
    size_t count = 0;
    const char *label = "op";
    if (dsi_model_layer_ops(x->model, layer, &x->ctx, r->fwd ? DS_PASS_FORWARD : DS_PASS_BACKWARD,
                            ops, DSI_ARRAY_SIZE(ops), &count) == DS_OK &&
        r->op >= 0 && (size_t)r->op < count && ops[r->op].label != NULL) {
        label = ops[r->op].label;
        ds_event_key_format(&ops[r->op].key, key, key_size);
    }
    char where[32];
    if (layer == DSI_PART_EMBEDDING)
        snprintf(where, sizeof(where), "embedding");
    else if (layer == DSI_PART_HEAD)
        snprintf(where, sizeof(where), "head");
    else
        snprintf(where, sizeof(where), "layer %d", layer);
    snprintf(text, size, "%s %s %s mb %d", r->fwd ? "fwd" : "bwd", where, label, r->mb);
}

ds_status_t ds_exec_write_trace(const ds_exec_t *x, size_t run, const char *path)
{
    if (run >= x->num_runs)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "run %zu (accepted: below %zu)", run, x->num_runs);
    if (x->rank != 0)
        return DS_OK;
    const dsi_xrun_t *r = &x->runs[run];
    double origin = INFINITY;
    for (size_t i = 0; i < r->num_recs; i++)
        if (r->recs[i].iteration == r->summary.warmup)
            origin = fmin(origin, r->recs[i].start_s);
    FILE *out = fopen(path, "w");
    if (out == NULL)
        return DSI_ERROR(DS_ERR_IO, "cannot write the trace '%s'", path);
    fprintf(out, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [");
    bool first = true;
    for (int rank = 0; rank < x->size; rank++)
        for (int track = 0; track < 2; track++) {
            fprintf(out,
                    "%s\n{\"ph\": \"M\", \"pid\": 0, \"tid\": %d, \"name\": \"thread_name\", "
                    "\"args\": {\"name\": \"rank %d %s\"}}",
                    first ? "" : ",", rank * 2 + track, rank, track ? "communication" : "compute");
            first = false;
        }
    for (size_t i = 0; i < r->num_recs; i++) {
        const dsi_xrec_t *e = &r->recs[i];
        if (e->iteration < r->summary.warmup)
            continue;
        char name[160], key[256];
        name_of(x, e, name, sizeof(name), key, sizeof(key));
        int track = e->kind == DSI_XK_COMPUTE || e->kind == DSI_XK_OPT ? 0 : 1;
        fprintf(out,
                ",\n{\"ph\": \"X\", \"pid\": 0, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, "
                "\"cat\": \"%s\", \"name\": \"%s\", \"args\": {\"key\": \"%s\", "
                "\"iteration\": %d}}",
                e->rank * 2 + track, (e->start_s - origin) * 1e6, (e->end_s - e->start_s) * 1e6,
                kind_names[e->kind], name, key, e->iteration);
    }
    fprintf(out, "\n]}\n");
    if (fclose(out) != 0)
        return DSI_ERROR(DS_ERR_IO, "cannot write the trace '%s'", path);
    return DS_OK;
}
