/* Communication costs from the cluster alone: the model fitted on no
 * samples, kept per cluster network so that estimating many keys does not
 * build a model for each. */
#include "dsi_comm_assumed.h"

#include "dsi_comm.h"

#include <pthread.h>

#define ASSUMED_MODELS 4

typedef struct assumed_entry {
    ds_cluster_t cluster; /* the network the model was built on */
    ds_comm_library_t library;
    ds_comm_model_t *model;
    uint64_t last_use;
} assumed_entry_t;

static pthread_mutex_t assumed_lock = PTHREAD_MUTEX_INITIALIZER;
static assumed_entry_t assumed_models[ASSUMED_MODELS];
static uint64_t assumed_clock;

/* Whether two clusters have the same network, as the model reads it. */
static bool same_network(const ds_cluster_t *a, const ds_cluster_t *b)
{
    if (a->gpus_per_node != b->gpus_per_node || a->num_levels != b->num_levels ||
        a->device.network_latency_us != b->device.network_latency_us ||
        a->device.network_GBps != b->device.network_GBps)
        return false;
    for (int l = 0; l < a->num_levels && l < DS_MAX_NET_LEVELS; l++) {
        const ds_net_level_t *x = &a->levels[l], *y = &b->levels[l];
        if (x->latency_us != y->latency_us || x->bandwidth_GBps != y->bandwidth_GBps ||
            x->span != y->span || x->oversubscription != y->oversubscription ||
            x->nics_per_node != y->nics_per_node)
            return false;
    }
    return true;
}

/* The model of `cluster`, built on first use (the least recently used one
 * replaced).  Called with the lock held. */
static ds_status_t assumed_model(const ds_cluster_t *cluster, ds_comm_library_t library,
                                 const ds_comm_model_t **model_p)
{
    assumed_entry_t *slot = &assumed_models[0];
    for (int i = 0; i < ASSUMED_MODELS; i++) {
        assumed_entry_t *e = &assumed_models[i];
        if (e->model != NULL && e->library == library && same_network(&e->cluster, cluster)) {
            e->last_use = ++assumed_clock;
            *model_p = e->model;
            return DS_OK;
        }
        if (e->model == NULL || (slot->model != NULL && e->last_use < slot->last_use))
            slot = e;
    }
    ds_comm_model_t *model = NULL;
    ds_comm_model_options_t options;
    ds_comm_model_options_init(&options);
    options.library = library;
    DSI_TRY(ds_comm_model_create(cluster, NULL, 0, &options, &model));
    ds_comm_model_destroy(slot->model);
    slot->cluster = *cluster;
    slot->library = library;
    slot->model = model;
    slot->last_use = ++assumed_clock;
    *model_p = model;
    return DS_OK;
}

ds_status_t dsi_comm_assumed_seconds(const ds_cluster_t *cluster, ds_comm_library_t library,
                                     const ds_event_key_t *key, double *seconds_p)
{
    if (pthread_mutex_lock(&assumed_lock) != 0)
        return DSI_ERROR(DS_ERR_INTERNAL, "the lock of the assumed communication models failed");
    const ds_comm_model_t *model = NULL;
    ds_comm_prediction_t prediction;
    ds_status_t status = assumed_model(cluster, library, &model);
    if (status == DS_OK)
        status = ds_comm_model_predict_in_job(model, key, cluster->nodes, &prediction);
    pthread_mutex_unlock(&assumed_lock);
    if (status != DS_OK)
        return status;
    *seconds_p = prediction.cost.mean_s;
    return DS_OK;
}
