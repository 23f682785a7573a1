/* Private parts of the events module. */
#ifndef DSI_EVENTS_H
#define DSI_EVENTS_H

#include <dsmpi/events.h>

#include "dsi_core.h"

/* First-order cost of one occurrence on `cluster`: the roofline of its
 * device for compute, a ring/latency-bandwidth model on the level the group
 * spans for communication.  Used to order and balance work before anything
 * is measured; predictions use measured or fitted costs instead. */
double dsi_estimate_seconds(const ds_event_key_t *key, double flops, double bytes,
                            const ds_cluster_t *cluster);

#endif /* DSI_EVENTS_H */
