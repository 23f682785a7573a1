/*
 * Generic layer-list models, for networks that are not transformers:
 *
 *   {"format": "dsmpi-layers", "name": "mlp", "dtype": "fp32",
 *    "global_batch": 256, "classes": 1000,
 *    "layers": [{"name": "block", "repeat": 4, "ops": [
 *        {"op": "linear", "in_features": 1024, "out_features": 4096, "parallel": "column"},
 *        {"op": "relu", "elements": 4096},
 *        {"op": "linear", "in_features": 4096, "out_features": 1024, "parallel": "row"}]}]}
 *
 * Shapes are per sample; the micro-batch multiplies the rows.  Operators:
 * linear (in_features, out_features, rows = 1, bias = true, parallel =
 * none|column|row), conv2d (in_channels, out_channels, kernel, stride = 1,
 * padding = kernel/2, height, width: run as an implicit GEMM), norm
 * (channels, elements), relu / gelu / dropout / add / pool (elements),
 * softmax (rows, cols).
 */
#include "dsi_model.h"

#include "dsi_json.h"

#include <string.h>

#define MAX_LAYER_OPS 48 /* a linear is three backward operators */
#define MAX_DIM (1LL << 31)
#define MAX_ELEMENTS (1LL << 40)

static const char *const op_names[] = {"linear",  "conv2d",  "norm", "relu", "gelu",
                                       "softmax", "dropout", "add",  "pool"};
static const dsi_generic_op_kind_t op_kinds[] = {
    DSI_GENERIC_LINEAR,  DSI_GENERIC_CONV2D,  DSI_GENERIC_NORM, DSI_GENERIC_RELU, DSI_GENERIC_GELU,
    DSI_GENERIC_SOFTMAX, DSI_GENERIC_DROPOUT, DSI_GENERIC_ADD,  DSI_GENERIC_POOL};

/* A tensor of a x b elements (each at most 2^31) is refused past
 * MAX_ELEMENTS, so that parameter and FLOP counts stay far from overflow. */
static ds_status_t check_tensor(const char *origin, const dsi_generic_op_t *op, const char *what,
                                int64_t a, int64_t b)
{
    if (a * b > MAX_ELEMENTS)
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "%s: %s \"%s\": %s of %lld x %lld elements (accepted: at most %lld)",
                         origin, op_names[op->kind], op->name, what, (long long)a, (long long)b,
                         (long long)MAX_ELEMENTS);
    return DS_OK;
}

static ds_status_t parse_op(const json_t *object, const char *origin, dsi_generic_op_t *op)
{
    if (!json_is_object(object))
        return DSI_ERROR(DS_ERR_BAD_FILE, "%s: an entry of \"ops\" is not an object", origin);
    const char *name = NULL;
    DSI_TRY(dsi_json_string(object, "op", origin, true, &name));
    int index = -1;
    for (size_t i = 0; i < DSI_ARRAY_SIZE(op_names); i++)
        if (strcmp(name, op_names[i]) == 0)
            index = (int)i;
    if (index < 0)
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "%s: op \"%s\" is not known (accepted: linear, conv2d, norm, relu, gelu, "
                         "softmax, dropout, add, pool)",
                         origin, name);
    memset(op, 0, sizeof(*op));
    op->kind = op_kinds[index];
    snprintf(op->name, sizeof(op->name), "%s", name);
    const char *label = NULL;
    DSI_TRY(dsi_json_string(object, "name", origin, false, &label));
    if (label != NULL)
        snprintf(op->name, sizeof(op->name), "%s", label);

    bool bias = true;
    switch (op->kind) {
    case DSI_GENERIC_LINEAR: {
        const char *parallel = "none";
        op->rows = 1;
        DSI_TRY(dsi_json_int(object, "in_features", origin, 1, MAX_DIM, true, &op->inner));
        DSI_TRY(dsi_json_int(object, "out_features", origin, 1, MAX_DIM, true, &op->cols));
        DSI_TRY(dsi_json_int(object, "rows", origin, 1, MAX_DIM, false, &op->rows));
        DSI_TRY(dsi_json_bool(object, "bias", origin, false, &bias));
        DSI_TRY(dsi_json_string(object, "parallel", origin, false, &parallel));
        if (strcmp(parallel, "column") == 0)
            op->split = DSI_TP_COLUMN;
        else if (strcmp(parallel, "row") == 0)
            op->split = DSI_TP_ROW;
        else if (strcmp(parallel, "none") != 0)
            return DSI_ERROR(DS_ERR_BAD_FILE,
                             "%s: \"parallel\" = \"%s\" (accepted: none, column, row)", origin,
                             parallel);
        DSI_TRY(check_tensor(origin, op, "weights", op->inner, op->cols));
        DSI_TRY(check_tensor(origin, op, "input", op->rows, op->inner));
        DSI_TRY(check_tensor(origin, op, "output", op->rows, op->cols));
        op->params = op->inner * op->cols + (bias ? op->cols : 0);
        break;
    }
    case DSI_GENERIC_CONV2D: {
        int64_t in = 0, out = 0, kernel = 0, stride = 1, padding = -1, height = 0, width = 0;
        DSI_TRY(dsi_json_int(object, "in_channels", origin, 1, 1 << 20, true, &in));
        DSI_TRY(dsi_json_int(object, "out_channels", origin, 1, 1 << 20, true, &out));
        DSI_TRY(dsi_json_int(object, "kernel", origin, 1, 1024, true, &kernel));
        DSI_TRY(dsi_json_int(object, "stride", origin, 1, 1024, false, &stride));
        DSI_TRY(dsi_json_int(object, "padding", origin, 0, 1024, false, &padding));
        DSI_TRY(dsi_json_int(object, "height", origin, 1, 1 << 16, true, &height));
        DSI_TRY(dsi_json_int(object, "width", origin, 1, 1 << 16, true, &width));
        DSI_TRY(dsi_json_bool(object, "bias", origin, false, &bias));
        if (padding < 0)
            padding = kernel / 2;
        int64_t out_h = (height + 2 * padding - kernel) / stride + 1;
        int64_t out_w = (width + 2 * padding - kernel) / stride + 1;
        if (out_h < 1 || out_w < 1)
            return DSI_ERROR(DS_ERR_BAD_FILE,
                             "%s: conv2d \"%s\" has no output (kernel %lld larger than the padded "
                             "%lldx%lld input)",
                             origin, op->name, (long long)kernel, (long long)height,
                             (long long)width);
        op->rows = out_h * out_w;
        op->cols = out;
        op->inner = in * kernel * kernel;
        DSI_TRY(check_tensor(origin, op, "weights", op->inner, op->cols));
        DSI_TRY(check_tensor(origin, op, "unfolded input", op->rows, op->inner));
        DSI_TRY(check_tensor(origin, op, "output", op->rows, op->cols));
        op->params = op->inner * out + (bias ? out : 0);
        break;
    }
    case DSI_GENERIC_NORM: {
        int64_t elements = 0;
        DSI_TRY(dsi_json_int(object, "channels", origin, 1, MAX_DIM, true, &op->cols));
        DSI_TRY(dsi_json_int(object, "elements", origin, 1, MAX_ELEMENTS, true, &elements));
        if (elements % op->cols != 0)
            return DSI_ERROR(DS_ERR_BAD_FILE,
                             "%s: norm \"%s\": %lld elements are not a multiple of %lld channels",
                             origin, op->name, (long long)elements, (long long)op->cols);
        op->rows = elements / op->cols;
        op->params = 2 * op->cols;
        break;
    }
    case DSI_GENERIC_SOFTMAX:
        DSI_TRY(dsi_json_int(object, "rows", origin, 1, MAX_DIM, true, &op->rows));
        DSI_TRY(dsi_json_int(object, "cols", origin, 1, MAX_DIM, true, &op->cols));
        DSI_TRY(check_tensor(origin, op, "input", op->rows, op->cols));
        break;
    default:
        op->rows = 1;
        DSI_TRY(dsi_json_int(object, "elements", origin, 1, MAX_ELEMENTS, true, &op->cols));
        break;
    }
    return DS_OK;
}

static ds_status_t parse_layer(const json_t *object, const char *origin, dsi_generic_layer_t *layer,
                               int64_t *repeat_p)
{
    if (!json_is_object(object))
        return DSI_ERROR(DS_ERR_BAD_FILE, "%s: an entry of \"layers\" is not an object", origin);
    const char *name = "layer";
    DSI_TRY(dsi_json_string(object, "name", origin, false, &name));
    snprintf(layer->name, sizeof(layer->name), "%s", name);
    int64_t repeat = 1;
    DSI_TRY(dsi_json_int(object, "repeat", origin, 1, 100000, false, &repeat));
    const json_t *ops = json_object_get(object, "ops");
    if (!json_is_array(ops) || json_array_size(ops) == 0 || json_array_size(ops) > MAX_LAYER_OPS)
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "%s: layer \"%s\" needs \"ops\", an array of 1 to %d operators", origin,
                         layer->name, MAX_LAYER_OPS);
    layer->num_ops = (int)json_array_size(ops);
    DSI_TRY(dsi_calloc((size_t)layer->num_ops, sizeof(*layer->ops), &layer->ops));
    for (int i = 0; i < layer->num_ops; i++)
        DSI_TRY(parse_op(json_array_get(ops, (size_t)i), origin, &layer->ops[i]));
    *repeat_p = repeat;
    return DS_OK;
}

ds_status_t dsi_model_from_layer_list(const void *json_root, const char *origin, ds_model_t *model)
{
    const json_t *root = json_root;
    ds_model_info_t *info = &model->info;
    memset(info, 0, sizeof(*info));
    info->arch = DS_ARCH_LAYER_LIST;
    info->source = DS_MODEL_LAYER_LIST;
    info->seq_len = 1;
    info->dtype = DS_DTYPE_FP32;
    info->global_batch = 256;
    const char *name = "layer-list", *dtype = NULL;
    DSI_TRY(dsi_json_string(root, "name", origin, false, &name));
    snprintf(info->name, sizeof(info->name), "%s", name);
    DSI_TRY(dsi_json_string(root, "dtype", origin, false, &dtype));
    if (dtype != NULL && ds_dtype_parse(dtype, &info->dtype) != DS_OK)
        return DSI_ERROR(DS_ERR_BAD_FILE, "%s: \"dtype\" = \"%s\" (accepted: fp32, bf16, fp16)",
                         origin, dtype);
    DSI_TRY(dsi_json_int(root, "global_batch", origin, 1, 1LL << 32, false, &info->global_batch));
    DSI_TRY(dsi_json_int(root, "classes", origin, 0, MAX_DIM, false, &model->classes));

    const json_t *layers = json_object_get(root, "layers");
    if (!json_is_array(layers) || json_array_size(layers) == 0 || json_array_size(layers) > 100000)
        return DSI_ERROR(DS_ERR_BAD_FILE, "%s: \"layers\" must be an array of 1 to 100000 layers",
                         origin);
    size_t count = json_array_size(layers);
    int64_t *repeats = NULL;
    ds_status_t status;
    DSI_TRY(dsi_calloc(count, sizeof(*model->generic), &model->generic));
    DSI_TRY(dsi_calloc(count, sizeof(*repeats), &repeats));
    int64_t total = 0;
    for (size_t i = 0; i < count; i++) {
        model->num_generic = (int)i + 1;
        DSI_TRY_GOTO(
            parse_layer(json_array_get(layers, i), origin, &model->generic[i], &repeats[i]), status,
            out);
        total += repeats[i];
    }
    if (total > 100000) {
        status = DSI_ERROR(DS_ERR_BAD_FILE,
                           "%s: %lld layers after \"repeat\" (accepted: at most 100000)", origin,
                           (long long)total);
        goto out;
    }
    DSI_TRY_GOTO(dsi_calloc((size_t)total, sizeof(*model->layer_of), &model->layer_of), status,
                 out);
    int64_t next = 0;
    for (size_t i = 0; i < count; i++)
        for (int64_t r = 0; r < repeats[i]; r++)
            model->layer_of[next++] = (int)i;
    info->num_layers = (int)total;
    status = dsi_model_finish(model, origin);
out:
    dsi_free(repeats);
    return status;
}
