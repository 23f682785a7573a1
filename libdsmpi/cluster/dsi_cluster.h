/* Private parts of the cluster module shared by its files. */
#ifndef DSI_CLUSTER_H
#define DSI_CLUSTER_H

#include <dsmpi/cluster.h>

/* The index of device `name` in the device tables: devices.c's
 * specifications and device_model.c's models list the same devices in the
 * same order (test_device_model checks it).  DS_ERR_INVALID_ARG naming the
 * accepted names. */
ds_status_t dsi_device_index(const char *name, int *index_p);

/* The built-in systems (systems.c), and the table ds_system_at reads from
 * now on (systems_file.c's merge of a site file; NULL: the built-in one). */
void dsi_systems_builtin(const ds_system_t **table_p, size_t *count_p);
void dsi_systems_set(const ds_system_t *table, size_t count);

#endif /* DSI_CLUSTER_H */
