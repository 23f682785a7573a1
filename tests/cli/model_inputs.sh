#!/bin/bash
# How dsmpi reads a model and its sizes: Hugging Face configs of mixture-of-
# experts models are refused whatever the family calls its experts (one line,
# exit 2); a refused tp suggests only the values that pass every check; sizes
# take K/M/G as powers of 1024, token counts powers of 1000.
#   model_inputs.sh DSMPI DATA_DIR
set -u
dsmpi=$1 data=$2
failures=0 checks=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

. "$(dirname "$0")/lib_expect.bash"

# Mixture of experts: Qwen2-MoE written with the dense model_type "qwen2", a
# DeepSeek-V3-style config, a mixtral model_type, dbrx's experts in ffn_config.
cat >"$tmp/qwen2-moe.json" <<'JSON'
{"model_type": "qwen2", "num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 16,
 "num_key_value_heads": 16, "intermediate_size": 5632, "vocab_size": 151936, "num_experts": 60,
 "num_experts_per_tok": 4, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632}
JSON
cat >"$tmp/deepseek-v3.json" <<'JSON'
{"model_type": "deepseek_v3", "num_hidden_layers": 61, "hidden_size": 7168, "n_routed_experts": 256,
 "n_shared_experts": 1, "num_experts_per_tok": 8, "moe_intermediate_size": 2048}
JSON
printf '{"model_type": "mixtral", "num_hidden_layers": 32}\n' >"$tmp/mixtral.json"
printf '{"model_type": "dbrx", "ffn_config": {"moe_num_experts": 16, "moe_top_k": 4}}\n' >"$tmp/dbrx.json"
for command in "events --target-gpus 8" "predict --estimate-missing --target-gpus 8" \
    "search --estimate-missing --target-gpus 8" "plan --estimate-missing --gpus 8,16 --tokens 1B"; do
    # shellcheck disable=SC2086 # the command's words
    expect_error 2 "qwen2-moe.json: mixture-of-experts (num_experts = 60) is not modelled yet (accepted: dense models)" \
        $command --model "$tmp/qwen2-moe.json"
done
expect_error 2 "deepseek-v3.json: mixture-of-experts (n_routed_experts = 256) is not modelled yet" events --model "$tmp/deepseek-v3.json" --target-gpus 8
expect_error 2 "mixtral.json: mixture-of-experts (model_type \"mixtral\") is not modelled yet (accepted: dense models of model_type gpt2" events --model "$tmp/mixtral.json" --target-gpus 8
expect_error 2 "dbrx.json: mixture-of-experts (ffn_config.moe_num_experts = 16) is not modelled yet" events --model "$tmp/dbrx.json" --target-gpus 8
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
