/* Shared plumbing of the dsmpi subcommands: MPI start-up, error exits,
 * the common options and output helpers.  Public API only. */
#ifndef DSMPI_APP_H
#define DSMPI_APP_H

#include <dsmpi/dsmpi.h>

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

/* Exit codes: 0 success, 1 runtime failure, 2 bad input, 3 the predicted
 * strategy does not fit in device memory (predict and run print the
 * prediction and exit 3 unless --allow-oom). */
#define APP_EXIT_OK 0
#define APP_EXIT_FAILURE 1
#define APP_EXIT_USAGE 2
#define APP_EXIT_OOM 3

typedef struct app {
    int argc;
    char **argv;
    const char *command;
    bool mpi; /* MPI_Init was called */
    int rank; /* 0 when not under MPI */
    int size;
    MPI_Comm exit_comm; /* the ranks meet on it at exit (app_mpi_stop) */
} app_t;

/* Starts MPI when `required` or when the process was started by an MPI
 * launcher (mpiexec, srun), so that only rank 0 prints. */
int app_mpi_start(app_t *app, bool required);
/* Starts MPI for a command that needs it, unless --help is among its words:
 * then help() is printed without MPI.  Under a launcher MPI starts now (so
 * that only rank 0 prints a usage error); a process started alone parses its
 * options first and starts MPI with app_mpi_require after them, so that
 * --help and usage errors need no MPI.  -1: go on; else the exit code. */
int app_mpi_command_start(app_t *app, void (*help)(void));
/* Starts MPI when it does not run yet.  -1: it runs; else the exit code. */
int app_mpi_require(app_t *app);
/* Ends MPI with the command's exit code.  The ranks meet first; a rank that
 * failed and is not joined by the others within APP_EXIT_WAIT_S (they wait
 * in a collective it left) says why on stderr and ends the job with
 * MPI_Abort(code), so that a failure on one rank never hangs the job. */
void app_mpi_stop(app_t *app, int code);

/* Prints "dsmpi <command>: <message>" on stderr (rank 0 only, or every rank
 * when `all_ranks`) and returns the exit code for `status`. */
int app_fail(const app_t *app, ds_status_t status);
int app_usage_error(const app_t *app, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "dsmpi <command>: warning: <message>" on stderr (rank 0 only); the
 * exit status is not changed. */
void app_warning(const app_t *app, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The usage error of a getopt_long loop over app->argv that returned '?': one line naming the
 * option and what went wrong (not known, needs a value, takes no value), then `accepted` in
 * parentheses (NULL: "see 'dsmpi <command> --help'").  Returns APP_EXIT_USAGE. */
int app_option_error(const app_t *app, const char *accepted);

/* ---- common options --------------------------------------------------------- */

typedef enum output_format { OUTPUT_TABLE, OUTPUT_JSON, OUTPUT_CSV } output_format_t;

#define INPUTS_MAX_STRATEGY_ITEMS 32

typedef struct inputs {
    const char *model_spec;
    int64_t seq_len;      /* 0 = the model's */
    int64_t global_batch; /* 0 = the strategy's or the model's */
    const char *dtype;
    ds_strategy_t strategy;
    bool strategy_given;
    /* The --strategy texts and Megatron options in the strategy grammar, in
     * the order given (what plan fixes its search with); the first Megatron
     * option without an item (or past the last slot), else NULL. */
    const char *strategy_items[INPUTS_MAX_STRATEGY_ITEMS];
    size_t num_strategy_items;
    char megatron_items[INPUTS_MAX_STRATEGY_ITEMS][64];
    const char *strategy_unfixable;
    int64_t target_gpus;
    int target_gpus_per_node;
    const char *target_text;
    const char *cluster_file;
    const char *systems_file;  /* --systems FILE: loaded when given */
    const ds_system_t *system; /* --target system=NAME: set by inputs_build_target */
    const char *device;
    output_format_t format;
    bool quiet;
    bool demo;
    const char *out_dir; /* --out DIR: where a command writes its files (created) */
    const app_t *app;    /* set by app_parse_options: for warnings while building */
    /* Built by inputs_build. */
    ds_model_t *model;
    ds_cluster_t cluster;
} inputs_t;

/* Long options every model-and-strategy command accepts, with the Megatron
 * aliases; the NULL-terminated tables a, b, c (each may be NULL) are
 * appended.  Returns a table the caller frees with free(). */
struct option *inputs_long_options(const struct option *a, const struct option *b,
                                   const struct option *c);
/* The same for a NULL-terminated list of tables. */
struct option *inputs_long_options_list(const struct option *const *tables);
void inputs_init(inputs_t *in);
/* Handles one option of the common set; returns 1 when handled, 0 when the
 * option is not a common one, -1 (message printed) on bad input. */
int inputs_handle(const app_t *app, inputs_t *in, int id, const char *arg);
/* Loads the model, builds the target cluster and resolves the strategy. */
ds_status_t inputs_build(inputs_t *in);
/* The same without the strategy (search, plan), and the model alone. */
ds_status_t inputs_build_target(inputs_t *in);
ds_status_t inputs_build_model(inputs_t *in);
void inputs_free(inputs_t *in);
/* One more kind of option a command takes: fn returns 1 when it took the
 * option, 0 when it is not its own, -1 on a bad value (message printed). */
typedef struct app_option_handler {
    int (*fn)(const app_t *app, void *ctx, int id, const char *arg);
    void *ctx;
} app_option_handler_t;

/* Parses the command line: the common options and the option tables listed
 * in `tables` (a NULL-terminated list of NULL-terminated tables); each option goes to the handlers
 * in order, then to the common ones.  `help_id` prints help() on rank 0.  Returns -1 when every
 * word was taken, else the exit code (usage errors printed; APP_EXIT_OK after --help).  Every
 * command's own option parsing returns the same way: -1 to go on. */
int app_parse_options(app_t *app, inputs_t *in, const struct option *const *tables,
                      const app_option_handler_t *handlers, size_t num_handlers, int help_id,
                      void (*help)(void));
/* The same for commands that take words after the options: they are left,
 * from *first_positional on. */
int app_parse_options_positional(app_t *app, inputs_t *in, const struct option *const *tables,
                                 const app_option_handler_t *handlers, size_t num_handlers,
                                 int help_id, void (*help)(void), int *first_positional);

/* The options of an executor run, common to execute and validate:
 * --iterations, --warmup (1 to 100000), --backend, --trace FILE.  Add
 * app_run_long_options to the tables and {app_run_option, &run} to the
 * handlers. */
enum { APP_OPT_ITERATIONS = 400, APP_OPT_WARMUP, APP_OPT_BACKEND, APP_OPT_TRACE };
typedef struct app_run_options {
    ds_exec_options_t *exec;
    ds_backend_kind_t *backend;
    const char **trace;
} app_run_options_t;
extern const struct option app_run_long_options[];
int app_run_option(const app_t *app, void *ctx, int id, const char *arg);

/* Options that take several files ("--nccl-tests A B C"): the option's value and every word
 * after it up to the next option (a word starting with '-') or the end are appended to
 * paths[*count..max); "--nccl-tests A --nccl-tests B" adds to the same list.  The words are
 * consumed: getopt_long goes on after them.  Call from an option handler while
 * app_parse_options (or another getopt_long loop over app->argv) runs.  1 taken, -1 more than
 * `max` files (message printed). */
int app_take_files(const app_t *app, const char *option, const char *arg, const char **paths,
                   int max, int *count);
/* The next word after the option just parsed when it is one of its values (not an option),
 * consumed; NULL at the next option or the end.  What app_take_files is built on. */
const char *app_next_option_word(const app_t *app);

/* Help text of the common options. */
void inputs_print_help(FILE *out);

/* --target system=...: the target is a catalogued system (system_target.c). */
bool inputs_target_is_system(const inputs_t *in);
/* The cluster of `text` (system=NAME[,nodes=N]) into *cluster and in->system;
 * refuses --cluster, --target-gpus/--target-nodes, and a --gpus-per-node or
 * --device other than the system's. */
ds_status_t inputs_system_target(inputs_t *in, const char *text, ds_cluster_t *cluster);
/* True when the user named the target's device (--device, device= in
 * --target, or --cluster). */
bool inputs_target_names_device(const inputs_t *in);
/* Makes `spec` the target's device (and renames the cluster), unless the
 * user named one. */
void inputs_default_device(inputs_t *in, const ds_device_spec_t *spec);

/* DIR/name in `path` when --out was given (the directory is created) and
 * returns path; NULL otherwise. */
const char *inputs_out_path(const inputs_t *in, const char *name, char *path, size_t size);

/* The demo: a GPT-2-class model on a 1024-GPU target. */
void inputs_set_demo(inputs_t *in);

/* A model by preset name or file, with its sequence length (when > 0) and
 * dtype (when not NULL) set; *model_p stays NULL on failure. */
ds_status_t app_model_load(const char *spec, int64_t seq_len, const char *dtype_text,
                           ds_model_t **model_p);

/* ---- output -------------------------------------------------------------------- */

/* The '#' preamble of a results table: version, command line, ranks. */
void output_preamble(const app_t *app, FILE *out);
/* "dsmpi <command> <args...>" for the records a run leaves. */
void app_command_line(const app_t *app, char *text, size_t size);
/* Writes `text` as one CSV field: quoted (with doubled quotes) when it holds a comma, a quote
 * or a line break. */
void output_csv_field(FILE *out, const char *text);
/* Writes `text` as a JSON string literal. */
void output_json_string(FILE *out, const char *text);
/* The same, or null when `text` is NULL. */
void output_json_string_or_null(FILE *out, const char *text);
/* Opens a command's JSON object on stdout: {"model": ..., and the strategy
 * as text when `with_strategy`. */
void output_json_open(const inputs_t *in, bool with_strategy);

#endif /* DSMPI_APP_H */
