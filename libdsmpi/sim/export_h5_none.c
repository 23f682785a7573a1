/* The HDF5 timeline in a build without HDF5 (the SimGrid SMPI build). */
#include <dsmpi/sim.h>

#include "dsi_core.h"

ds_status_t ds_sim_write_timeline(ds_sim_t *sim, const char *path)
{
    (void)sim;
    return DSI_ERROR(DS_ERR_UNSUPPORTED,
                     "this build has no HDF5 (built for SimGrid SMPI): cannot write the timeline "
                     "%s; write a Perfetto trace instead",
                     path);
}
