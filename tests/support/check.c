#include "check.h"

int check_failures;
int check_count;

int check_summary(const char *name)
{
    if (check_failures != 0) {
        fprintf(stderr, "%s: %d of %d checks failed\n", name, check_failures, check_count);
        return 1;
    }
    printf("%s: %d checks passed\n", name, check_count);
    return 0;
}
