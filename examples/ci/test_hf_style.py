"""A test written the way Hugging Face writes its model tests: the device comes from
``transformers.testing_utils.torch_device``, which the environment sets —

    TRANSFORMERS_TEST_DEVICE=tpu TRANSFORMERS_TEST_BACKEND=tpuemu pytest examples/ci

(``TRANSFORMERS_TEST_BACKEND`` imports tpuemu where ``import torch`` did not already.)"""

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.testing_utils import require_torch_accelerator, torch_device


def _tiny_llama():
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    return LlamaForCausalLM(cfg).eval()


@require_torch_accelerator
def test_llama_logits_match_the_cpu():
    model = _tiny_llama()
    ids = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(ids).logits
        got = model.to(torch_device)(ids.to(torch_device)).logits
    assert got.device.type == torch_device
    torch.testing.assert_close(got.cpu(), want, rtol=2e-2, atol=2e-2)


@require_torch_accelerator
def test_llama_trains_one_step(tpu_device):
    assert tpu_device.type == torch_device
    model = _tiny_llama().train().to(torch_device)
    ids = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(2))
    ids = ids.to(torch_device)
    loss = model(ids, labels=ids).loss
    loss.backward()
    assert loss.device.type == torch_device and torch.isfinite(loss).item()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
