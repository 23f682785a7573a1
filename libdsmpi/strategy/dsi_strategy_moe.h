/* Private to the strategy module: the mixture-of-experts items of the
 * grammar, their Megatron options and their checks (experts.c). */
#ifndef DSI_STRATEGY_MOE_H
#define DSI_STRATEGY_MOE_H

#include <dsmpi/strategy.h>

#include "dsi_core.h"

/* Applies key=value when `key` is an MoE item (*handled_p true), else leaves
 * the strategy alone (*handled_p false). */
ds_status_t dsi_strategy_apply_moe(ds_strategy_t *s, const char *key, const char *value,
                                   bool *handled_p);
/* Appends the MoE items that differ from the defaults. */
void dsi_strategy_format_moe(const ds_strategy_t *s, dsi_strbuf_t *buf);
/* The Megatron options of MoE: the strategy key they set (NULL: checked and
 * without an item), or DS_ERR_INVALID_ARG with *handled_p false when the
 * option is not one of them. */
ds_status_t dsi_strategy_megatron_moe(const char *option, const char *value, const char **key_p,
                                      bool *handled_p);
/* Checks ep, etp, top-k, skew and capacity against the model and the
 * derived dp and sets etp; `quiet` returns refusals without recording them. */
ds_status_t dsi_strategy_check_moe(ds_strategy_t *s, const ds_model_info_t *info, bool quiet);

#endif /* DSI_STRATEGY_MOE_H */
