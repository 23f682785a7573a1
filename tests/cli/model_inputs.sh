#!/bin/bash
# How dsmpi reads a model and its sizes: Hugging Face configs of mixture-of-
# experts models are read, or refused naming the expert field where the
# family has no reader (one line, exit 2); a refused tp suggests only the
# values that pass every check; sizes
# take K/M/G as powers of 1024, token counts powers of 1000.
#   model_inputs.sh DSMPI DATA_DIR
set -u
dsmpi=$1 data=$2
failures=0 checks=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

. "$(dirname "$0")/lib_expect.bash"

# Mixture of experts: configs of the MoE families are read (Qwen2-MoE written
# with the dense model_type "qwen2" too); families without an expert reader
# are refused naming the field; ep is checked against the experts and dp.
cat >"$tmp/qwen2-moe.json" <<'JSON'
{"model_type": "qwen2", "num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 16,
 "num_key_value_heads": 16, "intermediate_size": 5632, "vocab_size": 151936, "num_experts": 60,
 "num_experts_per_tok": 4, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632}
JSON
printf '{"model_type": "jamba", "num_hidden_layers": 32, "num_experts": 16}\n' >"$tmp/jamba.json"
expect_error 2 "jamba.json: mixture-of-experts (num_experts = 16) in model_type \"jamba\" is not modelled (accepted: experts in model_type mixtral" \
    events --model "$tmp/jamba.json" --target-gpus 8
expect_error 2 "ep=7 does not divide the 60 experts of qwen2-moe (accepted: 1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30, 60)" \
    events --model "$tmp/qwen2-moe.json" --strategy ep=7 --target-gpus 120 --global-batch 480
expect_error 2 "ep*etp = 8*1 does not divide dp*tp = 4*1 (Megatron-Core carves the expert-parallel group out of the data-parallel ranks; accepted: ep=1, 2, 4)" \
    events --model "$data/hf/mixtral-8x7b-v0.1.json" --strategy ep=8 --target-gpus 4
expect_error 2 "ep=2 needs a mixture-of-experts model (llama3-8b has no experts; accepted: ep=1)" \
    events --model llama3-8b --strategy ep=2 --target-gpus 8
expect_error 2 "router-skew '0.9' is not accepted (accepted: 1 to 64)" \
    events --model mixtral-8x7b --strategy ep=8,router-skew=0.9 --target-gpus 64
# A prediction with experts: the strategy says ep, --full gives the slowest
# expert ranks (EP coordinate 0: ranks 0-1, 16-17, ... with tp=2) their own row.
expect_ok predict --model mixtral-8x7b --target-gpus 64 --strategy tp=2,sp,ep=8,zero=1,flash \
    --estimate-missing --full
grep -q "^# strategy: dp=32,tp=2,pp=1,mbs=1,gbs=1024,schedule=1f1b,sp,flash,zero=1,ep=8 " "$tmp/out" ||
    fail "MoE strategy line: $(grep '^# strategy' "$tmp/out")"
grep -q "^  0-1,16-17,32-33,48-49 " "$tmp/out" || fail "no row of the slowest expert ranks: $(grep -A3 '^# per GPU' "$tmp/out")"
expect_ok predict --model "$data/hf/deepseek-v3.json" --seq-len 4096 --target-gpus 2048 \
    --strategy tp=2,sp,pp=16,ep=64,zero=1,flash,recompute=full,first-stage-layers=1,last-stage-layers=4 \
    --estimate-missing
grep -q "^# model: deepseek-v3 (671 B parameters" "$tmp/out" || fail "deepseek-v3: $(grep '^# model' "$tmp/out")"
# The same fields set to 0, 1 or null in a dense config are no experts.
sed -e 's/"num_experts": 60/"num_experts": null/' -e 's/"num_experts_per_tok": 4/"num_experts_per_tok": 0/' \
    -e 's/"moe_intermediate_size": 1408/"moe_intermediate_size": 0/' \
    -e 's/"shared_expert_intermediate_size": 5632/"num_local_experts": 1/' "$tmp/qwen2-moe.json" >"$tmp/qwen2-dense.json"
expect_ok events --model "$tmp/qwen2-dense.json" --target-gpus 8
grep -q "^# model: qwen2-dense" "$tmp/out" || fail "dense config with empty expert fields: $(head -c 300 "$tmp/out")"

# A refused tp suggests only values that pass every check: Qwen2.5-7B's 28
# heads take 7, 14 and 28, its 4 key/value heads do not.
qwen="$data/hf/qwen2.5-7b.json"
expect_error 2 "tp=8 does not divide the 28 attention heads of qwen2.5-7b (accepted: 1, 2, 4)" events --model "$qwen" --strategy tp=8 --target-gpus 64
for tp in 1 2 4; do
    expect_ok events --model "$qwen" --strategy tp=$tp --target-gpus 64
done
expect_error 2 "tp=7 does not divide the 4 key/value heads of qwen2.5-7b (accepted: 1, 2, 4)" events --model "$qwen" --strategy tp=7 --target-gpus 56 --global-batch 448

# Sizes take K/M/G as powers of 1024 (--seq-len 8k = 8192, --global-batch 1k =
# 1024), counts of tokens powers of 1000 (--tokens 1T = 10^12); the headers
# print the value used.
for command in "predict --strategy tp=8 --target-gpus 64" "search --target-gpus 64 --top 1" "plan --gpus 64 --tokens 1T"; do
    # shellcheck disable=SC2086 # the command's words
    expect_ok $command --model llama3-8b --seq-len 8k --global-batch 1k --estimate-missing
    grep -q "^# model: llama3-8b (8.03 B parameters, seq 8192, bf16)" "$tmp/out" ||
        fail "$command --seq-len 8k: $(grep '^# model' "$tmp/out")"
done
grep -q "global batch 1024 = 8.389M tokens per iteration" "$tmp/out" || fail "plan --global-batch 1k: $(grep '^# model' "$tmp/out")"
expect_ok plan --gpus 64 --tokens 1T --model llama3-8b --seq-len 8k --global-batch 1k --estimate-missing --json
grep -q '"tokens": 1000000000000,' "$tmp/out" || fail "plan --tokens 1T is not 10^12: $(head -c 200 "$tmp/out")"
grep -q '"steps": 119210,' "$tmp/out" || fail "plan --tokens 1T, 1024 x 8192 tokens a step: not 119210 steps"
expect_ok predict --model llama3-8b --strategy tp=8,mbs=2,gbs=2k --target-gpus 64 --estimate-missing --allow-oom
grep -q "^# strategy: dp=8,tp=8,pp=1,mbs=2,gbs=2048," "$tmp/out" || fail "gbs=2k: $(grep '^# strategy' "$tmp/out")"
expect_error 2 "seq-len '8KiB' is not a whole number (K/M/G allowed, powers of 1024: 8K = 8192)" events --model llama3-8b --seq-len 8KiB --target-gpus 8

echo "model_inputs: $checks checks, $failures failures"
[ "$failures" -eq 0 ]
