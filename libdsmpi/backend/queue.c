/*
 * Device queues for the executor (dsi_backend.h): thin checks over the
 * backend's queue operations, which only a backend whose work runs after
 * the issuing call returns has (cuda).
 */
#include "dsi_backend.h"

static ds_status_t no_queues(const ds_backend_t *b)
{
    return DSI_ERROR(DS_ERR_UNSUPPORTED,
                     "the %s backend has no device queues (its calls return when their work is "
                     "done)",
                     ds_backend_kind_name(b->kind));
}

int dsi_backend_queued(const ds_backend_t *b)
{
    const dsi_backend_ops_t *ops = b->ops;
    return ops->queue_mark != NULL && ops->marks_reserve != NULL && ops->queue_join != NULL &&
           ops->queue_wait_mark != NULL && ops->mark_done != NULL && ops->marks_read != NULL &&
           ops->comm_issue != NULL && ops->group_start != NULL && ops->group_end != NULL;
}

ds_status_t dsi_queue_mark(ds_backend_t *b, dsi_queue_t queue, size_t slot)
{
    return dsi_backend_queued(b) ? b->ops->queue_mark(b, (int)queue, slot) : no_queues(b);
}

ds_status_t dsi_queue_reserve_marks(ds_backend_t *b, size_t count)
{
    return dsi_backend_queued(b) ? b->ops->marks_reserve(b, count) : no_queues(b);
}

ds_status_t dsi_queue_join(ds_backend_t *b, dsi_queue_t from, dsi_queue_t to)
{
    return dsi_backend_queued(b) ? b->ops->queue_join(b, (int)from, (int)to) : no_queues(b);
}

ds_status_t dsi_queue_wait_mark(ds_backend_t *b, dsi_queue_t queue, size_t slot)
{
    return dsi_backend_queued(b) ? b->ops->queue_wait_mark(b, (int)queue, slot) : no_queues(b);
}

ds_status_t dsi_queue_mark_done(ds_backend_t *b, size_t slot, int *done_p)
{
    return dsi_backend_queued(b) ? b->ops->mark_done(b, slot, done_p) : no_queues(b);
}

ds_status_t dsi_queue_read_marks(ds_backend_t *b, size_t count, double *offsets_s)
{
    return dsi_backend_queued(b) ? b->ops->marks_read(b, count, offsets_s) : no_queues(b);
}

ds_status_t dsi_comm_group_start(ds_backend_t *b)
{
    return dsi_backend_queued(b) ? b->ops->group_start(b) : no_queues(b);
}

ds_status_t dsi_comm_group_end(ds_backend_t *b)
{
    return dsi_backend_queued(b) ? b->ops->group_end(b) : no_queues(b);
}
