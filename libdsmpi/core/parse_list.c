/* Comma-separated lists of numbers and of rank ranges, for the options that
 * take them (--microbatches 2,4,8, --gpus 256,512, --trace-ranks 0-7,64). */
#include "dsi_core.h"

#include <string.h>

/* At most this many characters of a list are quoted in an error. */
#define QUOTED_MAX 40

/* The next item of `list` starting at `p` into item[size]; *next_p is past
 * its comma (or at the end).  Fails on an item too long to be a number. */
static ds_status_t next_item(const char *list, const char *what, const char *p, char *item,
                             size_t size, const char **next_p)
{
    size_t n = strcspn(p, ",");
    if (n >= size)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "%s '%.*s%s' has an item of %zu characters", what,
                         QUOTED_MAX, list, strlen(list) > QUOTED_MAX ? "..." : "", n);
    memcpy(item, p, n);
    item[n] = '\0';
    *next_p = p + n + (p[n] == ',');
    return DS_OK;
}

ds_status_t ds_parse_int_list(const char *text, const char *what, int64_t min, int64_t max,
                              int count_suffix, int64_t *values, size_t capacity, size_t *count_p)
{
    const char *list = text != NULL ? text : "";
    size_t count = 0;
    for (const char *p = list; *p != '\0';) {
        char item[32];
        DSI_TRY(next_item(list, what, p, item, sizeof(item), &p));
        if (item[0] == '\0')
            return DSI_ERROR(DS_ERR_INVALID_ARG,
                             "%s '%.*s%s' has an empty item (accepted: e.g. "
                             "2,4,8)",
                             what, QUOTED_MAX, list, strlen(list) > QUOTED_MAX ? "..." : "");
        if (count == capacity)
            return DSI_ERROR(
                DS_ERR_INVALID_ARG, "%s '%.*s%s' has more than %zu items (accepted: at most %zu)",
                what, QUOTED_MAX, list, strlen(list) > QUOTED_MAX ? "..." : "", capacity, capacity);
        int64_t value;
        DSI_TRY(dsi_parse_i64(item, what, min, max, count_suffix != 0, &value));
        values[count++] = value;
        if (*p == '\0' && p[-1] == ',')
            return DSI_ERROR(DS_ERR_INVALID_ARG,
                             "%s '%.*s%s' ends with a comma (accepted: e.g. "
                             "2,4,8)",
                             what, QUOTED_MAX, list, strlen(list) > QUOTED_MAX ? "..." : "");
    }
    if (count == 0)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "%s '%s' names nothing (accepted: e.g. 2,4,8)", what,
                         list);
    *count_p = count;
    return DS_OK;
}

/* "A" or "A-B" with 0 <= A <= B < limit into *first_p, *last_p. */
static bool parse_range(const char *item, int64_t limit, int64_t *first_p, int64_t *last_p)
{
    const char *dash = strchr(item, '-');
    char first[32];
    size_t n = dash != NULL ? (size_t)(dash - item) : strlen(item);
    if (n == 0 || n >= sizeof(first))
        return false;
    memcpy(first, item, n);
    first[n] = '\0';
    /* The library's parsers set an error message; these are replaced by the
     * list's own, so they go through a quiet check first. */
    for (const char *c = item; *c != '\0'; c++)
        if ((*c < '0' || *c > '9') && c != dash)
            return false;
    int64_t a, b;
    if (dsi_parse_i64(first, "rank", 0, limit - 1, false, &a) != DS_OK)
        return false;
    b = a;
    if (dash != NULL && dsi_parse_i64(dash + 1, "rank", a, limit - 1, false, &b) != DS_OK)
        return false;
    *first_p = a;
    *last_p = b;
    return true;
}

ds_status_t ds_parse_rank_list(const char *text, int64_t limit, int64_t **ranks_p, size_t *count_p)
{
    const char *list = text != NULL ? text : "";
    const char *dots = strlen(list) > QUOTED_MAX ? "..." : "";
    int64_t *ranks = NULL;
    size_t count = 0, cap = 0;
    ds_status_t status = DS_OK;
    for (const char *p = list; *p != '\0' && status == DS_OK;) {
        char item[48];
        int64_t a, b;
        if (next_item(list, "rank list", p, item, sizeof(item), &p) != DS_OK ||
            !parse_range(item, limit, &a, &b) || (*p == '\0' && p[-1] == ',')) {
            status = DSI_ERROR(DS_ERR_INVALID_ARG,
                               "rank list '%.*s%s' (accepted: ranks or ranges below %lld, e.g. "
                               "0-7,64)",
                               QUOTED_MAX, list, dots, (long long)limit);
            break;
        }
        if ((int64_t)count + (b - a + 1) > limit) { /* more than every rank: repeats */
            status = DSI_ERROR(DS_ERR_INVALID_ARG,
                               "rank list '%.*s%s' names more than the %lld ranks there are "
                               "(accepted: each rank once)",
                               QUOTED_MAX, list, dots, (long long)limit);
            break;
        }
        if (count + (size_t)(b - a + 1) > cap) {
            size_t grown = cap == 0 ? 16 : cap;
            while (grown < count + (size_t)(b - a + 1))
                grown *= 2;
            status = dsi_realloc_array(&ranks, grown, sizeof(*ranks));
            cap = grown;
        }
        for (int64_t r = a; status == DS_OK && r <= b; r++)
            ranks[count++] = r;
    }
    if (status == DS_OK && count == 0)
        status = DSI_ERROR(DS_ERR_INVALID_ARG,
                           "rank list '%s' names no rank (accepted: ranks or ranges below %lld, "
                           "e.g. 0-7,64)",
                           list, (long long)limit);
    if (status != DS_OK) {
        dsi_free(ranks);
        return status;
    }
    *ranks_p = ranks;
    *count_p = count;
    return DS_OK;
}

void ds_rank_list_free(int64_t *ranks)
{
    dsi_free(ranks);
}
