/* Progress of a profiling run, printed by rank 0: an updating line on a
 * terminal, plain periodic lines otherwise (batch job logs). */
#include "dsi_profile_run.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

void dsi_progress_start(dsi_progress_t *p, const char *what, size_t total, double expected_s,
                        bool enabled)
{
    p->what = what;
    p->total = total;
    p->done = 0;
    p->expected_total_s = expected_s;
    p->expected_done_s = 0.0;
    p->enabled = enabled;
    p->terminal = enabled && isatty(STDERR_FILENO);
    p->start_s = dsi_now_s();
    p->last_print_s = p->start_s;
    p->last_done = 0;
}

double dsi_progress_eta(const dsi_progress_t *p, double elapsed_s)
{
    if (p->done >= p->total)
        return 0.0;
    if (p->expected_total_s > 0.0) {
        double left = DSI_MAX(p->expected_total_s - p->expected_done_s, 0.0);
        if (p->expected_done_s > 0.0 && elapsed_s > 0.0)
            return left * elapsed_s / p->expected_done_s;
        return DSI_MAX(p->expected_total_s - elapsed_s, 0.0);
    }
    return p->done > 0 ? elapsed_s * (double)(p->total - p->done) / (double)p->done : 0.0;
}

static void print_line(dsi_progress_t *p, double now, bool final)
{
    double elapsed = now - p->start_s;
    double eta = dsi_progress_eta(p, elapsed);
    if (p->terminal)
        fprintf(stderr, "\r%s: %zu/%zu done, %.0f s elapsed, ETA %.0f s   %s", p->what, p->done,
                p->total, elapsed, eta, final ? "\n" : "");
    else
        fprintf(stderr, "dsmpi: %s: %zu/%zu done, %.0f s elapsed, ETA %.0f s\n", p->what, p->done,
                p->total, elapsed, eta);
    fflush(stderr);
    p->last_print_s = now;
    p->last_done = p->done;
}

void dsi_progress_step(dsi_progress_t *p, size_t done, double expected_s)
{
    p->done = done;
    p->expected_done_s = expected_s;
    if (!p->enabled)
        return;
    double now = dsi_now_s();
    double period = p->terminal ? 0.5 : (double)dsi_param_int(DSI_PARAM_PROGRESS_PERIOD_S);
    if (now - p->last_print_s >= period)
        print_line(p, now, false);
}

void dsi_progress_finish(dsi_progress_t *p)
{
    /* A terminal line is closed; a log gets the final count once. */
    if (p->enabled &&
        (p->terminal || (p->total > 0 && p->last_print_s > p->start_s && p->last_done != p->done)))
        print_line(p, dsi_now_s(), true);
}

/* ---- stop requests ----------------------------------------------------------------
 * Set from signal handlers (SIGTERM, SIGUSR1 before a Slurm time limit):
 * only a sig_atomic_t store, which is async-signal-safe. */
static volatile sig_atomic_t stop_requested;

void ds_profiler_request_stop(void)
{
    stop_requested = 1;
}

bool dsi_stop_requested(void)
{
    return stop_requested != 0;
}
