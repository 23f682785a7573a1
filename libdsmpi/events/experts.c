/* Expert parameters per rank and their gradients' reduction over the
 * expert-data-parallel group, shared by event generation and the simulator. */
#include "dsi_events.h"

int dsi_expert_data_parallel(const ds_strategy_t *s)
{
    int etp = s->etp > 0 ? s->etp : s->tp, ep = s->ep > 0 ? s->ep : 1;
    return (int)((int64_t)s->tp * s->dp / ((int64_t)etp * ep));
}

int64_t dsi_stage_expert_params(const ds_model_t *model, const ds_strategy_t *s, int stage)
{
    if (model->info.num_experts == 0)
        return 0;
    int etp = s->etp > 0 ? s->etp : s->tp, ep = s->ep > 0 ? s->ep : 1;
    int64_t total = 0;
    for (int chunk = 0; chunk < s->vpp; chunk++) {
        int first, count;
        ds_strategy_chunk_layers(s, model->info.num_layers, stage, chunk, &first, &count);
        for (int layer = first; layer < first + count; layer++)
            total += dsi_model_layer_expert_params(model, layer, etp, ep);
    }
    return total;
}

int dsi_expert_grad_ops(const ds_strategy_t *s, ds_dtype_t dtype, int64_t params,
                        dsi_expert_grad_op_t ops[2])
{
    int edp = dsi_expert_data_parallel(s);
    int64_t grad_bytes = params * (int64_t)ds_dtype_size(s->grad_reduce_dtype);
    if (s->zero == 0) {
        ops[0].key = dsi_comm_step_key(s, DS_COMM_ALLREDUCE, DS_GROUP_EDP, edp,
                                       s->grad_reduce_dtype, grad_bytes);
        ops[0].label = "edp.expert-grad-allreduce";
        return 1;
    }
    ops[0].key = dsi_comm_step_key(s, DS_COMM_REDUCE_SCATTER, DS_GROUP_EDP, edp,
                                   s->grad_reduce_dtype, grad_bytes);
    ops[0].label = "edp.expert-grad-reduce-scatter";
    ops[1].key = dsi_comm_step_key(s, DS_COMM_ALLGATHER, DS_GROUP_EDP, edp, dtype,
                                   params * (int64_t)ds_dtype_size(dtype));
    ops[1].label = "edp.expert-param-allgather";
    return 2;
}

int64_t dsi_expert_optimizer_shard(const ds_strategy_t *s, int64_t expert_params)
{
    int edp = dsi_expert_data_parallel(s);
    return s->zero >= 1 ? (expert_params + edp - 1) / edp : expert_params;
}
