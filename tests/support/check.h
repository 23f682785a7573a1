/* A minimal test harness: CHECK-style assertions that report file:line and
 * keep going, and a summary that sets the exit code.  Exit 77 = skipped. */
#ifndef DSMPI_TEST_CHECK_H
#define DSMPI_TEST_CHECK_H

#include <dsmpi/dsmpi.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

extern int check_failures;
extern int check_count;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        check_count++;                                                                             \
        if (!(cond)) {                                                                             \
            check_failures++;                                                                      \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        check_count++;                                                                             \
        if (!(cond)) {                                                                             \
            check_failures++;                                                                      \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

#define CHECK_INT(actual, expected)                                                                \
    do {                                                                                           \
        long long check_a_ = (long long)(actual), check_e_ = (long long)(expected);                \
        CHECK_MSG(check_a_ == check_e_, "%s = %lld, expected %lld", #actual, check_a_, check_e_);  \
    } while (0)

/* |actual - expected| <= rel * |expected| */
#define CHECK_NEAR(actual, expected, rel)                                                          \
    do {                                                                                           \
        double check_a_ = (double)(actual), check_e_ = (double)(expected);                         \
        CHECK_MSG(fabs(check_a_ - check_e_) <= (rel)*fabs(check_e_),                               \
                  "%s = %.9g, expected %.9g within %g", #actual, check_a_, check_e_,               \
                  (double)(rel));                                                                  \
    } while (0)

#define CHECK_OK(call)                                                                             \
    do {                                                                                           \
        ds_status_t check_s_ = (call);                                                             \
        CHECK_MSG(check_s_ == DS_OK, "%s returned %s: %s", #call, ds_status_string(check_s_),      \
                  ds_last_error());                                                                \
    } while (0)

/* The call fails with `status` and its message contains `needle`. */
#define CHECK_FAILS(call, status, needle)                                                          \
    do {                                                                                           \
        ds_clear_error();                                                                          \
        ds_status_t check_s_ = (call);                                                             \
        CHECK_MSG(check_s_ == (status) && strstr(ds_last_error(), (needle)) != NULL,               \
                  "%s returned %s with '%s'; expected %s with '%s'", #call,                        \
                  ds_status_string(check_s_), ds_last_error(), ds_status_string(status),           \
                  (needle));                                                                       \
    } while (0)

int check_summary(const char *name);

/* MPI_Init for a test that needs exactly `ranks` ranks and `min_args`
 * arguments (argv[0] included): this rank's number, or -1 after rank 0
 * printed `usage` and MPI was finalized (the test then exits 1). */
int check_mpi_start(int *argc, char ***argv, int ranks, int min_args, const char *usage);
/* The end of such a test: the failures of every rank summed, rank 0's
 * summary, MPI_Finalize; the exit code. */
int check_mpi_finish(const char *name, int rank);

#endif /* DSMPI_TEST_CHECK_H */
