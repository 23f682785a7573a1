/* Communication costs from a cluster's network description alone, for the
 * modules that estimate costs before anything is measured (events, the
 * simulator's --estimate-missing path, the profiler's time budget). */
#ifndef DSI_COMM_ASSUMED_H
#define DSI_COMM_ASSUMED_H

#include <dsmpi/cluster.h>
#include <dsmpi/comm.h>
#include <dsmpi/events.h>

/* The time of communication key `key` on `cluster` as the communication
 * model predicts it without samples: ds_comm_model_create(cluster, no
 * samples, `library`'s algorithms) then ds_comm_model_predict_in_job on the
 * cluster's nodes (a job on all of them), so that every network level,
 * span, NIC count and oversubscription of the cluster shapes it exactly as
 * it shapes the fitted model's levels without data.  The models are kept
 * (a few clusters, process-wide, thread-safe) and rebuilt only when a
 * cluster's network changes.  Fails (and writes nothing) when the cluster
 * has no usable network levels or the key is not a valid communication key. */
ds_status_t dsi_comm_assumed_seconds(const ds_cluster_t *cluster, ds_comm_library_t library,
                                     const ds_event_key_t *key, double *seconds_p);

#endif /* DSI_COMM_ASSUMED_H */
