/* MPI start-up, error exits and output helpers shared by the subcommands. */
#include "app.h"

#include <mpi.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Set by every launcher we know of in the processes it starts. */
static bool launched_by_mpi(void)
{
    static const char *const vars[] = {
        "OMPI_COMM_WORLD_SIZE", "PMIX_RANK",    "PMI_RANK", "PMI_SIZE",
        "MPI_LOCALNRANKS",      "SLURM_STEP_ID"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        if (getenv(vars[i]) != NULL)
            return true;
    return false;
}

int app_mpi_start(app_t *app, bool required)
{
    app->rank = 0;
    app->size = 1;
    if (!required && !launched_by_mpi())
        return APP_EXIT_OK;
    int provided = 0;
    if (MPI_Init_thread(&app->argc, &app->argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "dsmpi %s: MPI_Init failed\n", app->command);
        return APP_EXIT_FAILURE;
    }
    app->mpi = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &app->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &app->size);
    if (MPI_Comm_dup(MPI_COMM_WORLD, &app->exit_comm) != MPI_SUCCESS)
        app->exit_comm = MPI_COMM_NULL;
    ds_log_set_rank(app->rank);
    return APP_EXIT_OK;
}

int app_mpi_command_start(app_t *app, void (*help)(void))
{
    for (int i = 1; i < app->argc; i++)
        if (strcmp(app->argv[i], "--help") == 0) {
            help();
            return APP_EXIT_OK;
        }
    int code = app_mpi_start(app, false);
    return code == APP_EXIT_OK ? -1 : code;
}

int app_mpi_require(app_t *app)
{
    if (app->mpi)
        return -1;
    int code = app_mpi_start(app, true);
    return code == APP_EXIT_OK ? -1 : code;
}

/* How long a failed rank waits for the others at exit before it takes
 * them to be stuck in a collective it left.  Ranks that succeeded wait as
 * long as it takes (rank 0 may predict for minutes after profiling). */
#define APP_EXIT_WAIT_S 10.0

/* Every rank's exit code, gathered at exit; false when the others did not
 * come within APP_EXIT_WAIT_S (only a rank that failed stops waiting). */
static bool exit_codes_meet(app_t *app, int code, int *codes)
{
    MPI_Request request = MPI_REQUEST_NULL;
    if (MPI_Iallgather(&code, 1, MPI_INT, codes, 1, MPI_INT, app->exit_comm, &request) !=
        MPI_SUCCESS)
        return false;
    double deadline = MPI_Wtime() + APP_EXIT_WAIT_S;
    const struct timespec pause = {0, 1000000}; /* SMPI's nanosleep is a macro: no literal */
    int met = 0;
    while (!met && (code == APP_EXIT_OK || MPI_Wtime() < deadline)) {
        if (MPI_Test(&request, &met, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return false;
        if (!met)
            nanosleep(&pause, NULL);
    }
    return met != 0;
}

void app_mpi_stop(app_t *app, int code)
{
    if (!app->mpi)
        return;
    int *codes = app->size > 1 && app->exit_comm != MPI_COMM_NULL
                     ? calloc((size_t)app->size, sizeof(int))
                     : NULL;
    if (codes != NULL) {
        bool met = exit_codes_meet(app, code, codes);
        int first_failed = -1;
        for (int r = 0; met && r < app->size && first_failed < 0; r++)
            if (codes[r] != APP_EXIT_OK)
                first_failed = r;
        /* Rank 0 said why it failed; a rank that failed alone says it here,
         * once: the lowest such rank, when rank 0 succeeded. */
        if (code != APP_EXIT_OK && app->rank != 0 &&
            (!met || (codes[0] == APP_EXIT_OK && first_failed == app->rank)))
            fprintf(stderr, "dsmpi %s: rank %d: %s\n", app->command, app->rank, ds_last_error());
        free(codes);
        if (!met && code != APP_EXIT_OK) {
            fflush(NULL);
            MPI_Abort(MPI_COMM_WORLD, code);
        }
        MPI_Comm_free(&app->exit_comm);
    }
    MPI_Finalize();
    app->mpi = false;
}

int app_fail(const app_t *app, ds_status_t status)
{
    if (app->rank == 0)
        fprintf(stderr, "dsmpi %s: %s\n", app->command, ds_last_error());
    return ds_status_is_input_error(status) ? APP_EXIT_USAGE : APP_EXIT_FAILURE;
}

int app_usage_error(const app_t *app, const char *fmt, ...)
{
    if (app->rank == 0) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "dsmpi %s: ", app->command);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    }
    return APP_EXIT_USAGE;
}

void app_warning(const app_t *app, const char *fmt, ...)
{
    if (app != NULL && app->rank != 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dsmpi %s: warning: ", app != NULL ? app->command : "");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int app_option_error(const app_t *app, const char *accepted)
{
    const char *word = optind >= 1 && optind <= app->argc ? app->argv[optind - 1] : "";
    const char *value = strchr(word, '=');
    int name_len = value != NULL ? (int)(value - word) : (int)strlen(word);
    char see[96];
    snprintf(see, sizeof(see), "see 'dsmpi %s --help'", app->command);
    /* getopt_long names a known long option in optopt: it lacked its value or took one it
     * does not have; an unknown one (or a short one) leaves optopt 0 (or its letter). */
    bool known = optopt != 0 && strncmp(word, "--", 2) == 0;
    if (known && value != NULL)
        return app_usage_error(app, "option '%.*s' takes no value (%s)", name_len, word, see);
    if (known)
        return app_usage_error(app, "option '%s' needs a value (%s)", word, see);
    return app_usage_error(app, "option '%.*s' is not known (%s)", name_len, word,
                           accepted != NULL ? accepted : see);
}

void output_preamble(const app_t *app, FILE *out)
{
    fprintf(out, "# dsmpi %s %s\n", DS_VERSION_STRING, app->command);
    fprintf(out, "# command:");
    for (int i = 0; i < app->argc; i++)
        fprintf(out, " %s", app->argv[i]);
    fprintf(out, "\n# ranks: %d%s\n", app->size, app->mpi ? "" : " (not under MPI)");
}

void app_command_line(const app_t *app, char *text, size_t size)
{
    size_t used = (size_t)snprintf(text, size, "dsmpi");
    for (int i = 0; i < app->argc && used < size; i++)
        used += (size_t)snprintf(text + used, size - used, " %s", app->argv[i]);
}

const char *app_next_option_word(const app_t *app)
{
    if (optind < 1 || optind >= app->argc || app->argv[optind][0] == '-')
        return NULL;
    return app->argv[optind++];
}

int app_take_files(const app_t *app, const char *option, const char *arg, const char **paths,
                   int max, int *count)
{
    for (const char *path = arg; path != NULL; path = app_next_option_word(app)) {
        if (*count >= max) {
            app_usage_error(app, "more than %d files for --%s (accepted: at most %d)", max, option,
                            max);
            return -1;
        }
        paths[(*count)++] = path;
    }
    return 1;
}

void output_csv_field(FILE *out, const char *text)
{
    if (strpbrk(text, ",\"\r\n") == NULL) {
        fputs(text, out);
        return;
    }
    fputc('"', out);
    for (const char *c = text; *c != '\0'; c++) {
        if (*c == '"')
            fputc('"', out);
        fputc(*c, out);
    }
    fputc('"', out);
}

void output_json_string(FILE *out, const char *text)
{
    fputc('"', out);
    for (const unsigned char *c = (const unsigned char *)text; *c != '\0'; c++) {
        if (*c == '"' || *c == '\\')
            fprintf(out, "\\%c", *c);
        else if (*c < 0x20)
            fprintf(out, "\\u%04x", *c);
        else
            fputc(*c, out);
    }
    fputc('"', out);
}

void output_json_string_or_null(FILE *out, const char *text)
{
    if (text != NULL)
        output_json_string(out, text);
    else
        fputs("null", out);
}

void output_json_open(const inputs_t *in, bool with_strategy)
{
    ds_model_info_t info;
    ds_model_get_info(in->model, &info);
    printf("{\"model\": ");
    output_json_string(stdout, info.name);
    if (with_strategy) {
        char strategy[DS_STRATEGY_TEXT_MAX];
        ds_strategy_format(&in->strategy, strategy, sizeof(strategy));
        printf(", \"strategy\": ");
        output_json_string(stdout, strategy);
    }
}

ds_status_t app_model_load(const char *spec, int64_t seq_len, const char *dtype_text,
                           ds_model_t **model_p)
{
    ds_model_t *model = NULL;
    ds_status_t status = ds_model_load(spec, &model);
    if (status == DS_OK && seq_len > 0)
        status = ds_model_set_seq_len(model, seq_len);
    if (status == DS_OK && dtype_text != NULL) {
        ds_dtype_t dtype;
        status = ds_dtype_parse(dtype_text, &dtype);
        if (status == DS_OK)
            status = ds_model_set_dtype(model, dtype);
    }
    if (status != DS_OK) {
        ds_model_destroy(model);
        return status;
    }
    *model_p = model;
    return DS_OK;
}
