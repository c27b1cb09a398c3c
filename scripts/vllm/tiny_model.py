"""Builds a tiny Llama-shaped model without the Hub, for the real-vLLM tests.

Random weights (seeded), a byte-level BPE trained here on generated text, a chat template,
and `<think>`/`</think>` as added tokens so `--reasoning-parser deepseek_r1` has its markers.
head_dim is 64: vLLM's CPU attention supports only some head sizes. The model never emits a
special token on purpose: every answer is exactly `max_tokens` long, and with a reasoning parser
all of it is reasoning, which makes the tests deterministic.

usage: python tiny_model.py OUT_DIR
"""

import random
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

out = sys.argv[1]
rng = random.Random(7)
words = ["the", "model", "answer", "prompt", "token", "data", "server", "reason", "think",
         "draft", "train", "batch", "cache", "queue", "step", "value", "number", "code", "math",
         "chat", "user", "assistant", "system", "hello", "world", "why", "how", "what", "is", "a"]
corpus = [" ".join(rng.choice(words) for _ in range(rng.randint(5, 40))) for _ in range(4000)]
corpus += [str(n) for n in range(2000)]

specials = ["<|begin|>", "<|end|>", "<|pad|>", "<think>", "</think>"]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(corpus, trainers.BpeTrainer(
    vocab_size=1024, special_tokens=specials[:3],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))

fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin|>",
                               eos_token="<|end|>", pad_token="<|pad|>")
fast.add_tokens(["<think>", "</think>"])
fast.chat_template = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{{ eos_token }}"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|><think>{% endif %}")
fast.save_pretrained(out)

torch.manual_seed(7)
config = LlamaConfig(vocab_size=len(fast), hidden_size=128, intermediate_size=256,
                     num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                     head_dim=64, max_position_embeddings=4096,
                     bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                     pad_token_id=fast.pad_token_id, torch_dtype="bfloat16")
model = LlamaForCausalLM(config).to(torch.bfloat16)
# No special token is ever generated, whatever the sampling: no EOS (every answer is exactly
# `max_tokens` long) and no `<think>`/`</think>` (with a reasoning parser the whole answer is
# reasoning). Hidden dimension 0 of the residual stream is a constant (every embedding has 8
# there and no layer writes to it), so after the final norm it is always positive, and those
# tokens' output rows read only that dimension, with a large negative weight.
with torch.no_grad():
    model.model.embed_tokens.weight[:, 0] = 8.0
    for layer in model.model.layers:
        layer.self_attn.o_proj.weight[0, :] = 0.0
        layer.mlp.down_proj.weight[0, :] = 0.0
    for token in specials:
        row = fast.convert_tokens_to_ids(token)
        model.lm_head.weight[row].fill_(0)
        model.lm_head.weight[row, 0] = -100.0
model.generation_config.eos_token_id = None
model.save_pretrained(out, safe_serialization=True)
# install-vllm.sh rebuilds a cached model without this marker (older builds could emit EOS).
open(f"{out}/gen-tiny-model-v3", "w").close()
print(f"tiny model in {out}: {sum(p.numel() for p in model.parameters())} parameters")
