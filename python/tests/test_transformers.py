"""Tiny Hugging Face models (built from configs; nothing downloaded) train on the tpu as on the
CPU."""

import copy
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")


def _models():
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    yield "gpt2", GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2))
    yield "llama", LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                                num_hidden_layers=2, num_attention_heads=4,
                                                num_key_value_heads=2, max_position_embeddings=32))


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_tiny_model_step_matches_cpu(name):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = dict(_models())[name].eval()  # eval: no dropout, so the two runs can agree
        dev = copy.deepcopy(model).to("tpu")
        ids = torch.randint(0, 64, (2, 16))
        ref = model(input_ids=ids, labels=ids)
        got = dev(input_ids=ids.to("tpu"), labels=ids.to("tpu"))
        ref.loss.backward()
        got.loss.backward()
    if name == "gpt2":
        assert dev.lm_head.weight is dev.transformer.wte.weight  # tied weights stay tied
    torch.testing.assert_close(got.loss.cpu(), ref.loss, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got.logits.detach().cpu(), ref.logits.detach(), rtol=1e-4, atol=1e-4)
    for (n, a), b in zip(model.named_parameters(), dev.parameters()):
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-3, atol=1e-5, msg=n)
