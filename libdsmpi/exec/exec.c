/*
 * The executor: process groups of a strategy, the rank's prepared stage
 * (kernels, collectives, transfers, buckets, optimizer) and the runs.
 */
#include "dsi_exec.h"

#include <string.h>

void ds_exec_options_init(ds_exec_options_t *options)
{
    memset(options, 0, sizeof(*options));
    options->warmup = 2;
    options->iterations = 5;
    options->progress_ops = (int)dsi_param_int(DSI_PARAM_EXEC_PROGRESS_OPS);
    options->max_foreign = dsi_param_double(DSI_PARAM_EXEC_MAX_FOREIGN);
}

/* ---- groups -------------------------------------------------------------------------------- */

/* Splits `comm` by `color` (MPI_UNDEFINED: not a member) and makes a
 * backend communicator of the part this rank is in, when it has more than
 * one member.  Collective over `comm`. */
static ds_status_t split_group(ds_backend_t *backend, MPI_Comm comm, int color, int key,
                               ds_comm_t **group_p)
{
    ds_status_t status = DS_OK;
    MPI_Comm part = MPI_COMM_NULL;
    int size = 0;
    *group_p = NULL;
    DSI_MPI_TRY_GOTO(MPI_Comm_split(comm, color, key, &part), status, out);
    if (part != MPI_COMM_NULL)
        DSI_MPI_TRY_GOTO(MPI_Comm_size(part, &size), status, out);
    if (size > 1)
        status = ds_comm_create(backend, part, group_p);
out:
    if (part != MPI_COMM_NULL)
        MPI_Comm_free(&part);
    /* A part that failed fails every part: the next split is over `comm`. */
    ds_status_t agreed = dsi_mpi_agree(comm, status);
    if (agreed != DS_OK && status == DS_OK) {
        ds_comm_destroy(*group_p);
        *group_p = NULL;
    }
    return agreed;
}

/* The expert-parallel (EP) or expert-data-parallel (EDP) group of `c`
 * under the folded strategy `s`: its colour and this rank's place in it,
 * numbered as the events number them (layout.c). */
static void expert_group_of(const ds_strategy_t *s, ds_coords_t c, bool ep_group, int *color_p,
                            int *key_p)
{
    int64_t etp = s->etp > 0 ? s->etp : s->tp, ep = s->ep > 0 ? s->ep : 1;
    int64_t local = c.tp + (int64_t)s->tp * c.dp;
    int64_t t = local % etp, e = local / etp % ep, d = local / (etp * ep);
    int64_t groups = ep_group ? (int64_t)s->tp * s->dp / ep : etp * ep;
    int64_t index = ep_group ? t + etp * d : t + etp * e;
    *color_p = (int)(index + groups * c.pp);
    *key_p = (int)(ep_group ? e : d);
}

ds_status_t dsi_groups_create(ds_backend_t *backend, const ds_model_t *model,
                              const ds_strategy_t *unfolded, dsi_groups_t *g)
{
    ds_status_t status = DS_OK;
    MPI_Comm comm = backend->comm;
    memset(g, 0, sizeof(*g));
    int cp = unfolded->cp > 1 ? unfolded->cp : 1;
    ds_strategy_t folded = dsi_strategy_fold_cp(unfolded);
    const ds_strategy_t *s = &folded;
    ds_coords_t c = ds_strategy_coords_of(s, backend->rank);
    int U = MPI_UNDEFINED;
    DSI_TRY_GOTO(ds_comm_create(backend, comm, &g->world), status, err);
    DSI_TRY_GOTO(split_group(backend, comm, c.dp + s->dp * c.pp, c.tp, &g->tp), status, err);
    DSI_TRY_GOTO(split_group(backend, comm, c.tp + s->tp * c.pp, c.dp, &g->dp), status, err);
    DSI_TRY_GOTO(split_group(backend, comm, c.dp, c.pp * s->tp + c.tp, &g->mp), status, err);
    /* The cp ranks of one replica: positions replica * cp + member of dp. */
    DSI_TRY_GOTO(
        split_group(backend, comm, c.tp + s->tp * (c.dp / cp + s->dp * c.pp), c.dp % cp, &g->cp),
        status, err);
    if (model->info.num_experts > 0) {
        int color, key;
        expert_group_of(s, c, true, &color, &key);
        DSI_TRY_GOTO(split_group(backend, comm, color, key, &g->ep), status, err);
        expert_group_of(s, c, false, &color, &key);
        DSI_TRY_GOTO(split_group(backend, comm, color, key, &g->edp), status, err);
    }
    int ends = c.pp == 0 || c.pp == s->pp - 1;
    if (dsi_has_tied_copy(&model->info, s))
        DSI_TRY_GOTO(
            split_group(backend, comm, ends ? c.tp + s->tp * c.dp : U, c.pp == 0 ? 0 : 1, &g->emb),
            status, err);
    g->next = dsi_schedule_next_stage(s, c.pp);
    g->prev = dsi_schedule_prev_stage(s, c.pp);
    /* Boundaries in ascending order on every rank: b -> next(b), sender first. */
    for (int b = 0; b < s->pp; b++) {
        int to = dsi_schedule_next_stage(s, b);
        if (to < 0)
            continue;
        int member = c.pp == b ? 0 : c.pp == to ? 1 : -1;
        ds_comm_t *pair = NULL;
        DSI_TRY_GOTO(
            split_group(backend, comm, member >= 0 ? c.tp + s->tp * c.dp : U, member, &pair),
            status, err);
        if (member == 0)
            g->pair_next = pair;
        else if (member == 1)
            g->pair_prev = pair;
    }
    return DS_OK;
err:
    dsi_groups_destroy(g);
    return status;
}

void dsi_groups_destroy(dsi_groups_t *g)
{
    ds_comm_destroy(g->pair_prev);
    ds_comm_destroy(g->pair_next);
    ds_comm_destroy(g->emb);
    ds_comm_destroy(g->edp);
    ds_comm_destroy(g->ep);
    ds_comm_destroy(g->cp);
    ds_comm_destroy(g->mp);
    ds_comm_destroy(g->dp);
    ds_comm_destroy(g->tp);
    ds_comm_destroy(g->world);
    memset(g, 0, sizeof(*g));
}

/* ---- the stage ------------------------------------------------------------------------------ */

/* The group a pass's collective runs on: TP (the expert-TP group is the
 * TP group: the executor runs etp = tp), CP or EP. */
static ds_comm_t *pass_group(const ds_exec_t *x, const ds_event_key_t *key)
{
    switch ((ds_group_t)key->group) {
    case DS_GROUP_TP: return x->groups.tp;
    case DS_GROUP_CP: return x->groups.cp;
    case DS_GROUP_EP: return x->groups.ep;
    default: return NULL;
    }
}

static ds_status_t pass_call_of(ds_exec_t *x, const ds_event_key_t *key, dsi_comm_call_t **call_p)
{
    for (int i = 0; i < x->num_tp_calls; i++)
        if (ds_event_key_equal(&x->tp_keys[i], key)) {
            *call_p = x->tp_calls[i];
            return DS_OK;
        }
    ds_comm_t *group = pass_group(x, key);
    if (group == NULL)
        return DSI_ERROR(DS_ERR_INTERNAL, "a collective of a pass on group %d without that group",
                         (int)key->group);
    int n = x->num_tp_calls;
    DSI_TRY(dsi_realloc_array(&x->tp_calls, (size_t)n + 1, sizeof(*x->tp_calls)));
    DSI_TRY(dsi_realloc_array(&x->tp_keys, (size_t)n + 1, sizeof(*x->tp_keys)));
    DSI_TRY(dsi_comm_call_prepare(group, key, DSI_CALL_ALL, 0, &x->tp_calls[n]));
    x->tp_keys[n] = *key;
    x->num_tp_calls = n + 1;
    *call_p = x->tp_calls[n];
    return DS_OK;
}

/* MoE operators a rank does not run: with ep > 1 the expert work is given
 * twice, at the mean rank's tokens and at the slowest's (router skew); the
 * rank the simulator makes its EP group's slowest runs the second, the
 * others the first. */
static bool skipped_expert_op(const ds_exec_t *x, const dsi_op_t *op)
{
    if (op->ep_role == DSI_EP_MEAN)
        return x->expert_slowest;
    if (op->ep_role == DSI_EP_SLOWEST)
        return !x->expert_slowest;
    return false;
}

/* The operators of one pass of a part, prepared; compute operators chained
 * to `*previous` (the last compute kernel of the pass so far). */
static ds_status_t prepare_pass(ds_exec_t *x, dsi_xpart_t *part, int pass_index,
                                ds_kernel_t **previous, bool tied_head)
{
    dsi_op_t ops[DSI_MAX_LAYER_OPS];
    size_t count = 0;
    ds_pass_t pass = pass_index == 0 ? DS_PASS_FORWARD : DS_PASS_BACKWARD;
    DSI_TRY(dsi_model_layer_ops(x->model, part->layer, &x->ctx, pass, ops, DSI_ARRAY_SIZE(ops),
                                &count));
    DSI_TRY(dsi_calloc(count ? count : 1, sizeof(dsi_xop_t), &part->ops[pass_index]));
    int kept = 0;
    for (size_t i = 0; i < count; i++) {
        if (skipped_expert_op(x, &ops[i]))
            continue;
        dsi_xop_t *op = &part->ops[pass_index][kept++];
        part->num_ops[pass_index] = kept;
        op->key = ops[i].key;
        op->grad_params = ops[i].grad_params;
        op->source = (int)i;
        if (op->key.kind == DS_EVENT_COMM) {
            DSI_TRY(pass_call_of(x, &op->key, &op->call));
            continue;
        }
        DSI_TRY(ds_kernel_prepare(x->backend, &op->key, &op->kernel));
        if (*previous != NULL) {
            int chained = 0;
            DSI_TRY(dsi_kernel_chain(op->kernel, *previous, &chained));
        }
        *previous = op->kernel;
        /* The last stage's copy of tied embeddings gets its gradient from the
         * logits' weight gradient (as the simulator counts it). */
        if (tied_head && op->key.op == DS_OP_GEMM && (op->key.variant & DS_GEMM_TRANS_A)) {
            op->grad_params +=
                dsi_vocab_share(&x->model->info, x->s.tp) * x->model->info.hidden_size;
            tied_head = false;
        }
    }
    return DS_OK;
}

static ds_status_t prepare_chunks(ds_exec_t *x)
{
    const ds_strategy_t *s = &x->s;
    int p = x->me.pp, v = s->vpp, L = x->model->info.num_layers;
    bool tied = dsi_has_tied_copy(&x->model->info, s);
    DSI_TRY(dsi_calloc((size_t)v, sizeof(*x->chunks), &x->chunks));
    for (int c = 0; c < v; c++) {
        int first, n;
        ds_strategy_chunk_layers(s, L, p, c, &first, &n);
        int embed = p == 0 && c == 0, head = p == s->pp - 1 && c == v - 1;
        dsi_xchunk_t *ch = &x->chunks[c];
        ch->num_parts = n + embed + head;
        DSI_TRY(dsi_calloc((size_t)DSI_MAX(ch->num_parts, 1), sizeof(*ch->parts), &ch->parts));
        int k = 0;
        if (embed)
            ch->parts[k++].layer = DSI_PART_EMBEDDING;
        for (int layer = first; layer < first + n; layer++)
            ch->parts[k++].layer = layer;
        if (head)
            ch->parts[k++].layer = DSI_PART_HEAD;
        for (int i = 0; i < ch->num_parts; i++) {
            dsi_xpart_t *part = &ch->parts[i];
            part->params = dsi_model_layer_params_tp(x->model, part->layer, s->tp);
            if (part->layer == DSI_PART_HEAD && tied)
                part->params +=
                    dsi_vocab_share(&x->model->info, s->tp) * x->model->info.hidden_size;
        }
    }
    /* Forward chains run parts in order, backward chains in reverse. */
    for (int c = 0; c < v; c++) {
        dsi_xchunk_t *ch = &x->chunks[c];
        ds_kernel_t *previous = NULL;
        for (int i = 0; i < ch->num_parts; i++)
            DSI_TRY(prepare_pass(x, &ch->parts[i], 0, &previous, false));
        previous = NULL;
        for (int i = ch->num_parts - 1; i >= 0; i--)
            DSI_TRY(prepare_pass(x, &ch->parts[i], 1, &previous,
                                 tied && ch->parts[i].layer == DSI_PART_HEAD));
    }
    /* Reverse parameter order over the whole stage (the simulator's part_rev). */
    int64_t total = 0, forward_pos = 0;
    for (int c = 0; c < v; c++)
        for (int i = 0; i < x->chunks[c].num_parts; i++)
            total += x->chunks[c].parts[i].params;
    for (int c = 0; c < v; c++)
        for (int i = 0; i < x->chunks[c].num_parts; i++) {
            dsi_xpart_t *part = &x->chunks[c].parts[i];
            part->rev = total - forward_pos - part->params;
            forward_pos += part->params;
        }
    x->stage_params = total;
    return DS_OK;
}

static ds_status_t prepare_p2p(ds_exec_t *x)
{
    const ds_strategy_t *s = &x->s;
    int p = x->me.pp;
    ds_dtype_t dtype = x->ctx.dtype;
    for (int dir = 0; dir < 4; dir++) {
        bool towards_next = dir == DSI_SEND_NEXT || dir == DSI_RECV_NEXT;
        int peer = towards_next ? x->groups.next : x->groups.prev;
        if (peer < 0)
            continue;
        ds_comm_t *pair = towards_next ? x->groups.pair_next : x->groups.pair_prev;
        if (pair == NULL)
            return DSI_ERROR(DS_ERR_INTERNAL, "stage %d has no pair group towards stage %d", p,
                             peer);
        /* Activations flow into the receiving stage of the boundary. */
        int into = towards_next ? peer : p;
        int64_t bytes = dsi_p2p_boundary_bytes(x->model, s, dtype, into) / x->cp;
        int channel = dir == DSI_SEND_NEXT || dir == DSI_RECV_PREV ? 0 : 1;
        bool send = dir == DSI_SEND_NEXT || dir == DSI_SEND_PREV;
        ds_event_key_t key;
        memset(&key, 0, sizeof(key));
        key.kind = DS_EVENT_COMM;
        key.op = DS_COMM_SENDRECV;
        key.dtype = (uint8_t)dtype;
        key.group = DS_GROUP_PP;
        key.group_size = 2;
        key.dims[0] = bytes;
        DSI_TRY(dsi_comm_call_prepare(pair, &key, send ? DSI_CALL_SEND : DSI_CALL_RECV, channel,
                                      &x->p2p[dir]));
        x->p2p_boundary[dir] = towards_next ? p : peer;
        x->p2p_channel[dir] = channel;
    }
    return DS_OK;
}

static ds_status_t prepare_end(ds_exec_t *x)
{
    const ds_strategy_t *s = &x->s;
    int p = x->me.pp;
    /* Buckets. */
    x->bucket = dsi_dp_bucket_params(s);
    if (s->dp > 1) {
        int64_t nb = (x->stage_params + x->bucket - 1) / x->bucket;
        if (nb > 4096)
            return DSI_ERROR(DS_ERR_UNSUPPORTED,
                             "bucket=%lld parameters makes %lld buckets on stage %d; the executor "
                             "runs at most 4096",
                             (long long)x->bucket, (long long)nb, p);
        x->num_buckets = (int)nb;
        DSI_TRY(dsi_calloc((size_t)DSI_MAX(nb, 1), sizeof(*x->buckets), &x->buckets));
        DSI_TRY(dsi_calloc((size_t)DSI_MAX(nb, 1), 1, &x->bucket_state));
        DSI_TRY(dsi_calloc((size_t)DSI_MAX(nb, 1), sizeof(*x->bucket_mark), &x->bucket_mark));
        for (int k = 0; k < x->num_buckets; k++) {
            int64_t params = DSI_MIN(x->bucket, x->stage_params - (int64_t)k * x->bucket);
            ds_event_key_t key =
                dsi_comm_step_key(s, DS_COMM_ALLREDUCE, DS_GROUP_DP, s->dp, s->grad_reduce_dtype,
                                  params * (int64_t)ds_dtype_size(s->grad_reduce_dtype));
            DSI_TRY(dsi_comm_call_prepare(x->groups.dp, &key, DSI_CALL_ALL, 0, &x->buckets[k]));
        }
    }
    if (x->ctx.sp) {
        ds_event_key_t key =
            dsi_comm_step_key(s, DS_COMM_ALLREDUCE, DS_GROUP_TP, s->tp, DS_DTYPE_FP32,
                              dsi_sp_norm_params(x->model, s, p) * 4);
        DSI_TRY(dsi_comm_call_prepare(x->groups.tp, &key, DSI_CALL_ALL, 0, &x->sp_call));
    }
    if (x->groups.emb != NULL) {
        ds_event_key_t key =
            dsi_comm_step_key(s, DS_COMM_ALLREDUCE, DS_GROUP_EMBEDDING, 2, DS_DTYPE_FP32,
                              dsi_embedding_grad_bytes(x->model, s));
        DSI_TRY(dsi_comm_call_prepare(x->groups.emb, &key, DSI_CALL_ALL, 0, &x->emb_call));
    }
    int mp = s->tp * s->pp;
    if (mp > 1 && (x->ctx.dtype == DS_DTYPE_FP16 || s->grad_clip)) {
        ds_event_key_t key =
            dsi_comm_step_key(s, DS_COMM_ALLREDUCE, DS_GROUP_MP, mp, DS_DTYPE_FP32, 4);
        DSI_TRY(dsi_comm_call_prepare(x->groups.mp, &key, DSI_CALL_ALL, 0, &x->mp_call));
    }
    /* Experts: their gradients over the EDP group, then their own step. */
    int64_t expert_params = dsi_stage_expert_params(x->model, s, p);
    if (expert_params > 0) {
        dsi_expert_grad_op_t ops[2];
        if (dsi_expert_data_parallel(s) > 1) {
            int n = dsi_expert_grad_ops(s, x->ctx.dtype, expert_params, ops);
            if (n != 1 || x->groups.edp == NULL)
                return DSI_ERROR(DS_ERR_INTERNAL, "expert gradients in %d steps on stage %d", n, p);
            DSI_TRY(
                dsi_comm_call_prepare(x->groups.edp, &ops[0].key, DSI_CALL_ALL, 0, &x->edp_call));
        }
        ds_event_key_t expert_opt = dsi_optimizer_key(dsi_expert_optimizer_shard(s, expert_params));
        DSI_TRY(ds_kernel_prepare(x->backend, &expert_opt, &x->expert_optimizer));
    }
    ds_event_key_t opt = dsi_optimizer_key(dsi_optimizer_shard(s, x->stage_params));
    return ds_kernel_prepare(x->backend, &opt, &x->optimizer);
}

/* Which backward actions fill buckets: the last backward of each chunk
 * (as the simulator marks them). */
static ds_status_t mark_sync(ds_exec_t *x)
{
    const ds_strategy_t *s = &x->s;
    dsi_program_t *prog = &x->program;
    DSI_TRY(dsi_calloc((size_t)DSI_MAX(prog->count, 1), 1, &x->sync));
    if (!(s->dp > 1 && s->overlap_grad_reduce))
        return DS_OK;
    for (int c = 0; c < s->vpp; c++)
        for (int32_t i = prog->count - 1; i >= 0; i--)
            if (prog->actions[i].type == DSI_ACT_BWD && prog->actions[i].chunk == c) {
                x->sync[i] = 1;
                break;
            }
    return DS_OK;
}

static ds_status_t check_supported(const ds_model_t *model, const ds_strategy_t *s, int ranks)
{
    int cp = s->cp > 1 ? s->cp : 1;
    if (cp > 1 && !s->flash_attention)
        return DSI_ERROR(DS_ERR_UNSUPPORTED,
                         "cp=%d without flash: the executor runs context parallelism with fused "
                         "attention only (accepted: cp=%d,flash)",
                         cp, cp);
    if (cp > 2 && s->cp_comm == DS_CP_COMM_P2P)
        return DSI_ERROR(DS_ERR_UNSUPPORTED,
                         "cp=%d with cp-comm=p2p: the executor runs the ring on 2 ranks only "
                         "(accepted: cp=2, or cp-comm=a2a|allgather)",
                         cp);
    int etp = s->etp > 0 ? s->etp : s->tp;
    if (model->info.num_experts > 0 && etp != s->tp)
        return DSI_ERROR(DS_ERR_UNSUPPORTED,
                         "etp=%d with tp=%d: the executor runs the experts on the TP group "
                         "(accepted: etp=%d)",
                         etp, s->tp, s->tp);
    int64_t devices = (int64_t)s->dp * cp * s->tp * s->pp;
    if (s->dp < 1 || devices != ranks)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "strategy dp=%d cp=%d tp=%d pp=%d needs %lld ranks; the executor runs on "
                         "%d (accepted: dp * cp * tp * pp = the ranks, strategy resolved)",
                         s->dp, cp, s->tp, s->pp, (long long)devices, ranks);
    if (s->zero != 0)
        return DSI_ERROR(DS_ERR_UNSUPPORTED, "zero=%d: the executor runs zero=0 only", s->zero);
    if (s->dp_algo != DS_DP_AUTO)
        return DSI_ERROR(DS_ERR_UNSUPPORTED,
                         "dp-algo %d: the executor runs the communication library's own choice "
                         "(dp-algo=auto) only",
                         (int)s->dp_algo);
    if (ds_strategy_num_microbatches(s) < 1)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "strategy gbs=%lld is not resolved",
                         (long long)s->gbs);
    return DS_OK;
}

static void destroy_chunks(ds_exec_t *x)
{
    for (int c = 0; x->chunks != NULL && c < x->s.vpp; c++) {
        dsi_xchunk_t *ch = &x->chunks[c];
        for (int i = 0; i < ch->num_parts; i++)
            for (int pass = 0; pass < 2; pass++) {
                for (int k = 0; k < ch->parts[i].num_ops[pass]; k++)
                    ds_kernel_destroy(ch->parts[i].ops[pass][k].kernel);
                dsi_free(ch->parts[i].ops[pass]);
            }
        dsi_free(ch->parts);
    }
    dsi_free(x->chunks);
    x->chunks = NULL;
}

ds_status_t ds_exec_create(ds_backend_t *backend, const ds_model_t *model,
                           const ds_strategy_t *strategy, ds_exec_t **exec_p)
{
    ds_status_t status = DS_OK;
    ds_exec_t *x = NULL;
    if (backend == NULL || model == NULL || strategy == NULL || exec_p == NULL)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "ds_exec_create needs a backend, model and strategy");
    DSI_TRY(check_supported(model, strategy, backend->size));
    DSI_TRY(dsi_calloc(1, sizeof(*x), &x));
    x->backend = backend;
    x->model = model;
    x->s = dsi_strategy_fold_cp(strategy);
    x->cp = strategy->cp > 1 ? strategy->cp : 1;
    x->comm = MPI_COMM_NULL;
    x->rank = backend->rank;
    x->size = backend->size;
    x->me = ds_strategy_coords_of(&x->s, x->rank);
    if (model->info.num_experts > 0 && strategy->ep > 1) {
        /* The simulator's slowest rank: expert coordinate 0 (place.c). */
        int etp = strategy->etp > 0 ? strategy->etp : strategy->tp;
        int64_t local = x->me.tp + (int64_t)x->s.tp * x->me.dp;
        x->expert_slowest = local / etp % strategy->ep == 0;
    }
    /* Timing on the host clock around each operator is right where calls
     * return when their work is done (cpu, replay); on device queues (cuda)
     * the device's own marks time them. */
    x->queued = dsi_backend_queued(backend);
    x->m = ds_strategy_num_microbatches(&x->s);
    /* The shapes keep cp: it splits the sequence and brings the exchange in. */
    dsi_shape_ctx_init(&x->ctx, model, strategy);
    DSI_TRY_GOTO(dsi_mpi_dup(backend->comm, &x->comm), status, err);
    DSI_TRY_GOTO(dsi_groups_create(backend, model, strategy, &x->groups), status, err);
    /* Preparation may fail on one rank only (memory): everyone agrees. */
    ds_status_t local = dsi_schedule_build(&x->s, x->m, x->me.pp, 0, &x->program);
    if (local == DS_OK)
        local = mark_sync(x);
    if (local == DS_OK)
        local = prepare_chunks(x);
    if (local == DS_OK)
        local = prepare_p2p(x);
    if (local == DS_OK)
        local = prepare_end(x);
    DSI_TRY_GOTO(dsi_mpi_agree(x->comm, local), status, err);
    x->clock_offset_s = dsi_comm_clock_offset(x->groups.world, &x->clock_error_s);
    *exec_p = x;
    return DS_OK;
err:
    ds_exec_destroy(x);
    return status;
}

void ds_exec_clear(ds_exec_t *exec)
{
    if (exec == NULL)
        return;
    for (size_t i = 0; i < exec->num_runs; i++)
        dsi_exec_run_free(&exec->runs[i]);
    dsi_free(exec->runs);
    exec->runs = NULL;
    exec->num_runs = 0;
}

void ds_exec_destroy(ds_exec_t *x)
{
    if (x == NULL)
        return;
    ds_exec_clear(x);
    destroy_chunks(x);
    for (int i = 0; i < x->num_tp_calls; i++)
        dsi_comm_call_release(x->tp_calls[i]);
    dsi_free(x->tp_calls);
    dsi_free(x->tp_keys);
    for (int dir = 0; dir < 4; dir++)
        dsi_comm_call_release(x->p2p[dir]);
    for (int k = 0; k < x->num_buckets; k++)
        dsi_comm_call_release(x->buckets[k]);
    dsi_free(x->buckets);
    dsi_free(x->bucket_state);
    dsi_free(x->bucket_mark);
    dsi_comm_call_release(x->sp_call);
    dsi_comm_call_release(x->emb_call);
    dsi_comm_call_release(x->mp_call);
    dsi_comm_call_release(x->edp_call);
    ds_kernel_destroy(x->optimizer);
    ds_kernel_destroy(x->expert_optimizer);
    dsi_program_free(&x->program);
    dsi_free(x->sync);
    dsi_free(x->recs);
    dsi_groups_destroy(&x->groups);
    if (x->comm != MPI_COMM_NULL)
        MPI_Comm_free(&x->comm);
    dsi_free(x);
}

/* ---- runs -------------------------------------------------------------------------------------
 */

ds_status_t ds_exec_run(ds_exec_t *x, const ds_exec_options_t *options)
{
    ds_status_t status = DS_OK;
    ds_exec_options_t o;
    if (options == NULL)
        ds_exec_options_init(&o);
    else
        o = *options;
    if (o.progress_ops <= 0)
        o.progress_ops = (int)DSI_MAX(dsi_param_int(DSI_PARAM_EXEC_PROGRESS_OPS), 1);
    if (!(o.max_foreign > 0.0))
        o.max_foreign = dsi_param_double(DSI_PARAM_EXEC_MAX_FOREIGN);
    if (o.warmup < 1 || o.iterations < 1 || o.warmup + o.iterations > 100000)
        return DSI_ERROR(
            DS_ERR_INVALID_ARG,
            "executor warmup=%d iterations=%d (accepted: warmup >= 1, iterations >= 1, "
            "at most 100000 in all)",
            o.warmup, o.iterations);
    /* Steps one rank may fail alone are agreed on; the agreement is also
     * the barrier that starts every rank's run together. */
    DSI_TRY(dsi_mpi_agree(x->comm, dsi_realloc_array(&x->runs, x->num_runs + 1, sizeof(*x->runs))));
    dsi_xrun_t *run = &x->runs[x->num_runs];
    memset(run, 0, sizeof(*run));
    x->num_recs = 0;
    dsi_load_probe_t before, after;
    double speed_before = 0.0, speed_after = 0.0;
    DSI_TRY_GOTO(dsi_mpi_agree(x->comm, dsi_speed_probe(x->backend, &speed_before)), status, out);
    dsi_load_probe(&before);
    DSI_TRY_GOTO(dsi_mpi_agree(x->comm, dsi_exec_marks_begin(x)), status, out);
    double start = dsi_now_s();
    int total = o.warmup + o.iterations;
    for (int it = 0; it < total; it++) {
        DSI_TRY_GOTO(dsi_exec_iteration(x, it, o.progress_ops), status, out);
        if (it == 0) {
            /* Room for every iteration, so that no allocation happens while timing. */
            size_t need = x->num_recs * (size_t)total + x->num_recs / 4 + 64;
            ds_status_t grown = DS_OK;
            if (need > x->cap_recs &&
                (grown = dsi_realloc_array(&x->recs, need, sizeof(*x->recs))) == DS_OK)
                x->cap_recs = need;
            /* ... and for every device mark (two per record at most, the anchor). */
            if (grown == DS_OK && x->queued)
                grown = dsi_queue_reserve_marks(x->backend, 2 * need + 2);
            DSI_TRY_GOTO(dsi_mpi_agree(x->comm, grown), status, out);
        }
    }
    DSI_TRY_GOTO(dsi_mpi_agree(x->comm, dsi_exec_marks_finish(x)), status, out);
    double wall = dsi_now_s() - start;
    if (x->queued)
        DSI_MPI_TRY_GOTO(
            MPI_Allreduce(MPI_IN_PLACE, &x->anchor_error_s, 1, MPI_DOUBLE, MPI_MAX, x->comm),
            status, out);
    dsi_load_probe(&after);
    DSI_TRY_GOTO(dsi_mpi_agree(x->comm, dsi_speed_probe(x->backend, &speed_after)), status, out);
    ds_exec_load_t load;
    DSI_TRY_GOTO(dsi_load_report(x->comm, &before, &after, DSI_MAX(speed_before, speed_after),
                                 o.max_foreign, o.reference_probe_s, &load),
                 status, out);
    DSI_TRY_GOTO(dsi_exec_finish_run(x, &o, &load, wall, run), status, out);
    x->num_runs++;
out:
    if (status != DS_OK)
        dsi_exec_run_free(run);
    return status;
}

size_t ds_exec_run_count(const ds_exec_t *exec)
{
    return exec->num_runs;
}
