/*
 * dsmpi profiler: measures the unique events of one or more (model,
 * strategy, target) on the running allocation, each rank its share, and
 * gathers the costs into the profile database.
 */
#ifndef DSMPI_PROFILE_H
#define DSMPI_PROFILE_H

#include <dsmpi/core.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Asks a running profiler to stop after the event in hand, save what was
 * measured and return DS_ERR_INTERRUPTED.  Async-signal-safe: call it from
 * SIGTERM / SIGUSR1 handlers (what Slurm sends before a time limit). */
DS_API void ds_profiler_request_stop(void);

#ifdef __cplusplus
}
#endif

#endif /* DSMPI_PROFILE_H */
