/* Private pieces of the profiling run: progress display and stop requests. */
#ifndef DSI_PROFILE_RUN_H
#define DSI_PROFILE_RUN_H

#include <dsmpi/profile.h>

#include "dsi_core.h"

#include <signal.h>

typedef struct dsi_progress {
    const char *what;
    size_t total, done, last_done;
    bool enabled, terminal;
    double start_s, last_print_s;
} dsi_progress_t;

void dsi_progress_start(dsi_progress_t *p, const char *what, size_t total, bool enabled);
void dsi_progress_step(dsi_progress_t *p, size_t done);
void dsi_progress_finish(dsi_progress_t *p);

/* True once ds_profiler_request_stop() ran (on this rank). */
bool dsi_stop_requested(void);

#endif /* DSI_PROFILE_RUN_H */
