/*
 * Foreign CPU load during a run: how much of a rank's core went to other
 * processes and to other guests of the hypervisor.
 *
 * From /proc/stat (the line of the core the rank is pinned to, or the "cpu"
 * line of all cores when it is not pinned) and /proc/self/stat, in clock
 * ticks:
 *   foreign = (busy ticks of the core - this process's utime + stime) / total ticks
 *   steal   = steal ticks / total ticks
 * where busy = user + nice + system + irq + softirq (+ steal counted apart)
 * and total adds idle and iowait.  The kernel counts in ticks (usually 100
 * per second), so a run of one second resolves about 1%.
 */
#define _GNU_SOURCE /* sched_getcpu, CPU_COUNT */
#include "dsi_exec.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The counters of /proc/stat line `name` ("cpu" or "cpuN"). */
static int read_cpu_line(const char *name, int64_t *busy_p, int64_t *steal_p, int64_t *total_p)
{
    FILE *f = fopen("/proc/stat", "r");
    if (f == NULL)
        return 0;
    char line[512];
    size_t length = strlen(name);
    int found = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, name, length) != 0 || line[length] != ' ')
            continue;
        long long v[10] = {0};
        int n = sscanf(line + length, "%lld %lld %lld %lld %lld %lld %lld %lld %lld %lld", &v[0],
                       &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]);
        if (n < 8)
            break;
        /* user nice system idle iowait irq softirq steal (guest time is inside user) */
        *busy_p = v[0] + v[1] + v[2] + v[5] + v[6];
        *steal_p = v[7];
        *total_p = *busy_p + v[3] + v[4] + v[7];
        found = 1;
        break;
    }
    fclose(f);
    return found;
}

static int64_t own_ticks(void)
{
    FILE *f = fopen("/proc/self/stat", "r");
    if (f == NULL)
        return 0;
    char text[1024];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    /* The command name may hold spaces: fields start after the last ')'. */
    const char *p = strrchr(text, ')');
    if (p == NULL)
        return 0;
    long long utime = 0, stime = 0;
    /* state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lld %lld", &utime, &stime) != 2)
        return 0;
    return utime + stime;
}

void dsi_load_probe(dsi_load_probe_t *probe)
{
    memset(probe, 0, sizeof(*probe));
    probe->wall_s = dsi_now_s();
    cpu_set_t mask;
    CPU_ZERO(&mask);
    int cores = 0;
    if (sched_getaffinity(0, sizeof(mask), &mask) == 0)
        cores = CPU_COUNT(&mask);
    char name[32] = "cpu";
    if (cores == 1) {
        int core = sched_getcpu();
        if (core >= 0)
            snprintf(name, sizeof(name), "cpu%d", core);
    }
    if (!read_cpu_line(name, &probe->core_busy, &probe->core_steal, &probe->core_total))
        cores = 0;
    probe->cores = cores == 1 ? 1 : cores;
    probe->own_ticks = own_ticks();
}

void dsi_load_between(const dsi_load_probe_t *a, const dsi_load_probe_t *b, int64_t node_own,
                      double *foreign_p, double *steal_p)
{
    int64_t total = b->core_total - a->core_total;
    *foreign_p = 0.0;
    *steal_p = 0.0;
    if (total <= 0 || a->cores == 0 || b->cores == 0)
        return;
    /* Pinned: the core's busy time minus this process's; otherwise every
     * core's minus every rank of the node's (node_own). */
    int64_t busy = b->core_busy - a->core_busy;
    int64_t own = b->cores == 1 ? b->own_ticks - a->own_ticks : node_own;
    double foreign = (double)(busy - own) / (double)total;
    *foreign_p = foreign > 0.0 ? foreign : 0.0;
    *steal_p = (double)(b->core_steal - a->core_steal) / (double)total;
    /* A guest whose virtual core was not running does not count the ticks
     * at all on some hypervisors: time missing from the counters is stolen
     * too (per core: the counters of all cores add up `cores` per tick). */
    long hz = sysconf(_SC_CLK_TCK);
    double expected = (b->wall_s - a->wall_s) * (double)(hz > 0 ? hz : 100) * b->cores;
    if (expected > 0.0) {
        double missing = 1.0 - (double)total / expected;
        if (missing > *steal_p)
            *steal_p = missing;
    }
}

double dsi_load_average(void)
{
    double one = 0.0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f == NULL)
        return 0.0;
    if (fscanf(f, "%lf", &one) != 1)
        one = 0.0;
    fclose(f);
    return one;
}

ds_status_t dsi_load_report(MPI_Comm comm, const dsi_load_probe_t *before,
                            const dsi_load_probe_t *after, double speed_s, double max_foreign,
                            double reference_s, ds_exec_load_t *load_p)
{
    ds_status_t status = DS_OK;
    MPI_Comm node = MPI_COMM_NULL;
    int rank = 0;
    ds_exec_load_t load;
    memset(&load, 0, sizeof(load));
    DSI_MPI_TRY_GOTO(MPI_Comm_rank(comm, &rank), status, out);
    DSI_TRY_GOTO(dsi_mpi_split_node(comm, rank, &node), status, out);
    int64_t own = after->own_ticks - before->own_ticks, node_own = 0;
    DSI_MPI_TRY_GOTO(MPI_Allreduce(&own, &node_own, 1, MPI_INT64_T, MPI_SUM, node), status, out);
    double foreign = 0.0, steal = 0.0;
    dsi_load_between(before, after, node_own, &foreign, &steal);
    DSI_INFO("load: %.3f s, core ticks busy %lld total %lld, own %lld, node %lld (cores %d): "
             "foreign %.3f steal %.3f",
             after->wall_s - before->wall_s, (long long)(after->core_busy - before->core_busy),
             (long long)(after->core_total - before->core_total), (long long)own,
             (long long)node_own, after->cores, foreign, steal);
    double mine[4] = {foreign, steal, after->cores == 1 ? 0.0 : 1.0, speed_s}, worst[4];
    DSI_MPI_TRY_GOTO(MPI_Allreduce(mine, worst, 4, MPI_DOUBLE, MPI_MAX, comm), status, out);
    load.foreign_cpu = worst[0];
    load.steal = worst[1];
    load.pinned = worst[2] == 0.0;
    load.probe_s = worst[3];
    load.loadavg_1m = dsi_load_average();
    double slowdown = dsi_param_double(DSI_PARAM_EXEC_MAX_SLOWDOWN);
    load.noisy = worst[0] + worst[1] > max_foreign ||
                 (reference_s > 0.0 && worst[3] > (1.0 + slowdown) * reference_s);
    *load_p = load;
out:
    if (node != MPI_COMM_NULL)
        MPI_Comm_free(&node);
    return status;
}

ds_status_t dsi_speed_probe(ds_backend_t *backend, double *seconds_p)
{
    ds_status_t status = DS_OK;
    ds_kernel_t *kernel = NULL;
    ds_event_key_t key;
    memset(&key, 0, sizeof(key));
    key.kind = DS_EVENT_COMPUTE;
    key.op = DS_OP_GEMM;
    key.pass = DS_PASS_FORWARD;
    key.dtype = DS_DTYPE_FP32;
    key.variant = DS_GEMM_TRANS_B;
    key.dims[0] = key.dims[1] = key.dims[2] = 256;
    enum { WARM = 3, REPS = 25 };
    double t[REPS];
    DSI_TRY(ds_kernel_prepare(backend, &key, &kernel));
    for (int i = 0; i < WARM + REPS; i++) {
        double start = dsi_now_s();
        DSI_TRY_GOTO(ds_kernel_run(kernel), status, out);
        DSI_TRY_GOTO(ds_backend_synchronize(backend), status, out);
        if (i >= WARM)
            t[i - WARM] = dsi_now_s() - start;
    }
    qsort(t, REPS, sizeof(*t), dsi_compare_double);
    *seconds_p = t[REPS / 2];
out:
    ds_kernel_destroy(kernel);
    return status;
}

ds_status_t ds_exec_probe(ds_backend_t *backend, double window_s, const ds_exec_options_t *options,
                          ds_exec_load_t *load_p)
{
    ds_exec_options_t defaults;
    if (options == NULL) {
        ds_exec_options_init(&defaults);
        options = &defaults;
    }
    if (backend == NULL || load_p == NULL || !(window_s >= 0.0) || window_s > 3600.0)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "ds_exec_probe needs a backend and a window of 0 to 3600 s (got %g)",
                         window_s);
    ds_status_t status = DS_OK;
    double speed = 0.0;
    DSI_MPI_TRY_GOTO(MPI_Barrier(backend->comm), status, out);
    DSI_TRY(dsi_speed_probe(backend, &speed));
    dsi_load_probe_t before, after;
    dsi_load_probe(&before);
    struct timespec sleep = {(time_t)window_s, (long)((window_s - floor(window_s)) * 1e9)};
    while (nanosleep(&sleep, &sleep) != 0)
        continue;
    dsi_load_probe(&after);
    DSI_TRY(dsi_load_report(backend->comm, &before, &after, speed,
                            options->max_foreign > 0.0
                                ? options->max_foreign
                                : dsi_param_double(DSI_PARAM_EXEC_MAX_FOREIGN),
                            options->reference_probe_s, load_p));
out:
    return status;
}
