/* Private pieces of the profiling run: progress display and stop requests. */
#ifndef DSI_PROFILE_RUN_H
#define DSI_PROFILE_RUN_H

#include <dsmpi/profile.h>

#include "dsi_core.h"

#include <signal.h>

/* The ETA follows the plan's estimate (estimate.c), corrected by how the
 * run has gone so far: remaining = (expected_total - expected_done) x
 * elapsed / expected_done, the estimate alone before the first step. */
typedef struct dsi_progress {
    const char *what;
    size_t total, done, last_done;
    bool enabled, terminal;
    double start_s, last_print_s;
    double expected_total_s, expected_done_s;
} dsi_progress_t;

void dsi_progress_start(dsi_progress_t *p, const char *what, size_t total, double expected_s,
                        bool enabled);
/* `expected_s`: the estimate's time of what is done now. */
void dsi_progress_step(dsi_progress_t *p, size_t done, double expected_s);
/* Seconds left after `elapsed_s`, by the rule above. */
double dsi_progress_eta(const dsi_progress_t *p, double elapsed_s);
void dsi_progress_finish(dsi_progress_t *p);

/* True once ds_profiler_request_stop() ran (on this rank). */
bool dsi_stop_requested(void);

#endif /* DSI_PROFILE_RUN_H */
