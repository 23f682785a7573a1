/* Fuzz target: the text grammars users type: strategy strings, target
 * strings, event keys, cost tables, counts and SLURM_TASKS_PER_NODE.  The
 * first byte picks the grammar; the rest is the text. */
#include <dsmpi/dsmpi.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 65536)
        return 0;
    char *text = malloc(size);
    if (text == NULL)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    switch (data[0] % 6) {
    case 0: {
        ds_strategy_t s;
        ds_strategy_init(&s);
        if (ds_strategy_parse(text, &s) == DS_OK) {
            char back[DS_STRATEGY_TEXT_MAX];
            ds_strategy_format(&s, back, sizeof(back));
        }
        break;
    }
    case 1: {
        ds_cluster_t c;
        (void)ds_cluster_parse_target(text, &c);
        break;
    }
    case 2: {
        ds_event_key_t key;
        if (ds_event_key_parse(text, &key) == DS_OK) {
            char back[512];
            ds_event_key_format(&key, back, sizeof(back));
        }
        break;
    }
    case 3: {
        ds_cost_table_t *table = NULL;
        if (ds_cost_table_create(&table) == DS_OK)
            (void)ds_cost_table_parse(table, text, "fuzz.txt");
        ds_cost_table_destroy(table);
        break;
    }
    case 4: {
        int64_t value;
        (void)ds_parse_count(text, "value", INT64_MIN, INT64_MAX, &value);
        (void)ds_parse_size(text, "value", INT64_MIN, INT64_MAX, &value);
        break;
    }
    case 5: {
        int counts[64], nodes;
        (void)ds_slurm_parse_tasks_per_node(text, counts, 64, &nodes);
        break;
    }
    }
    free(text);
    return 0;
}
