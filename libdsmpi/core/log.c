/* The logger: "host:pid r<rank> level: message" lines on stderr. */
#include "dsi_core.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static int log_level = -1; /* -1: not read from DS_LOG_LEVEL yet */
static int log_rank = -1;
static char hostname[64];

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

const char *dsi_hostname(void)
{
    if (hostname[0] == '\0') {
        if (gethostname(hostname, sizeof(hostname) - 1) != 0)
            strcpy(hostname, "unknown");
        hostname[sizeof(hostname) - 1] = '\0';
        char *dot = strchr(hostname, '.');
        if (dot != NULL)
            *dot = '\0';
    }
    return hostname;
}

static int level_from_env(void)
{
    const char *text = dsi_param_string(DSI_PARAM_LOG_LEVEL);
    for (size_t i = 0; i < DSI_ARRAY_SIZE(level_names); i++)
        if (strcasecmp(text, level_names[i]) == 0)
            return (int)i;
    fprintf(stderr,
            "dsmpi: DS_LOG_LEVEL=%s is not a level (accepted: error, warn, info, debug, trace); "
            "using warn\n",
            text);
    return DS_LOG_WARN;
}

void ds_log_set_level(ds_log_level_t level)
{
    log_level = (int)level;
}

ds_log_level_t ds_log_get_level(void)
{
    if (log_level < 0)
        log_level = level_from_env();
    return (ds_log_level_t)log_level;
}

bool dsi_log_enabled(ds_log_level_t level)
{
    return (int)level <= (int)ds_log_get_level();
}

void ds_log_set_rank(int rank)
{
    log_rank = rank;
}

int dsi_log_rank(void)
{
    return log_rank;
}

void ds_log(ds_log_level_t level, const char *fmt, ...)
{
    if (!dsi_log_enabled(level))
        return;
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    char rank[16];
    if (log_rank >= 0)
        snprintf(rank, sizeof(rank), "r%d", log_rank);
    else
        strcpy(rank, "r-");
    /* One fprintf per line so lines of concurrent ranks do not interleave. */
    fprintf(stderr, "%s:%ld %s %s: %s\n", dsi_hostname(), (long)getpid(), rank,
            level_names[level <= DS_LOG_TRACE ? level : DS_LOG_TRACE], message);
}
