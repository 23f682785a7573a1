/* Private parts of the cluster module shared by its files. */
#ifndef DSI_CLUSTER_H
#define DSI_CLUSTER_H

#include <dsmpi/cluster.h>

/* The index of device `name` in the device tables: devices.c's
 * specifications and device_model.c's models list the same devices in the
 * same order (test_device_model checks it).  DS_ERR_INVALID_ARG naming the
 * accepted names. */
ds_status_t dsi_device_index(const char *name, int *index_p);

#endif /* DSI_CLUSTER_H */
