/* Fuzz target: command-line option values.  The first byte picks a command
 * (events, comm, search, plan, predict, or the option handling and input
 * building of profile); the rest is its argument vector, one argument a line.
 * The commands run in-process as dsmpi runs them, without MPI, in a scratch
 * directory that is emptied after every input; arguments with '/' or ".."
 * are skipped so that nothing outside it is read or written.  Output goes
 * to /dev/null (libFuzzer's -close_fd_mask=2 silences the error lines). */
#define _XOPEN_SOURCE 700 /* nftw */
#include "commands.h"
#include "profile_cmd.h"
#include "search_inputs.h"

#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_ARGS 48

static int remove_entry(const char *path, const struct stat *info, int flag, struct FTW *ftw)
{
    (void)info;
    (void)flag;
    if (ftw->level > 0)
        remove(path);
    return 0;
}

static char scratch[64];

static int setup(void)
{
    if (scratch[0] != '\0')
        return 0;
    snprintf(scratch, sizeof(scratch), "/tmp/dsmpi-fuzz-cli.XXXXXX");
    if (mkdtemp(scratch) == NULL || chdir(scratch) != 0 ||
        freopen("/dev/null", "w", stdout) == NULL)
        return -1;
    return 0;
}

/* glibc keeps a pointer into the previous argument vector between
 * getopt_long calls unless optind is 0: start every command afresh. */
static void reset_getopt(void)
{
    static const struct option none[] = {{NULL, 0, NULL, 0}};
    char name[] = "dsmpi";
    char *argv[] = {name, NULL};
    optind = 0;
    opterr = 0;
    while (getopt_long(1, argv, "", none, NULL) != -1) {
    }
}

/* dsmpi profile's option handling and input building (the measuring itself
 * needs MPI and is covered by the MPI tests). */
static int profile_options(app_t *app)
{
    inputs_t in;
    inputs_init(&in);
    profile_cmd_options_t o;
    profile_cmd_init(&o);
    struct option *table =
        inputs_long_options(NULL, profile_long_options(), search_space_long_options);
    if (table == NULL)
        return APP_EXIT_FAILURE;
    int id, code = -1;
    optind = 1;
    while (code < 0 && (id = getopt_long(app->argc, app->argv, "", table, NULL)) != -1) {
        int handled = id == '?' || id == ':' ? 0 : profile_handle(app, &o, id, optarg);
        if (handled == 0 && id != '?' && id != ':')
            handled = inputs_handle(app, &in, id, optarg);
        if (handled <= 0)
            code = APP_EXIT_USAGE;
    }
    free(table);
    if (code < 0) {
        ds_status_t status = o.search ? inputs_build_target(&in) : inputs_build(&in);
        ds_search_t *search = NULL;
        if (status == DS_OK && o.search)
            status = search_inputs_create(&o.space, in.model, &in.cluster, in.global_batch, NULL, 0,
                                          &search);
        ds_search_destroy(search);
        code = status == DS_OK ? APP_EXIT_OK : app_fail(app, status);
    }
    inputs_free(&in);
    return code;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const struct {
        const char *name;
        int (*run)(app_t *app);
    } commands[] = {
        {"events", cmd_events}, {"comm", cmd_comm},       {"search", cmd_search},
        {"plan", cmd_plan},     {"predict", cmd_predict}, {"profile", profile_options},
    };
    if (size < 1 || size > 8192 || setup() != 0)
        return 0;
    char *text = malloc(size);
    if (text == NULL)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    size_t which = data[0] % (sizeof(commands) / sizeof(commands[0]));
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = (char *)commands[which].name;
    bool safe = true;
    for (char *line = text; line != NULL && argc <= MAX_ARGS;) {
        char *next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        if (strchr(line, '/') != NULL || strstr(line, "..") != NULL)
            safe = false;
        argv[argc++] = line;
        line = next;
    }
    argv[argc] = NULL;
    if (safe) {
        app_t app = {argc, argv, commands[which].name, false, 0, 1, MPI_COMM_NULL};
        reset_getopt();
        (void)commands[which].run(&app);
        fflush(stdout);
        nftw(".", remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    }
    free(text);
    return 0;
}
