"""The zoo's Llama sharded the PyTorch way: tensor and sequence parallelism with
``torch.distributed.tensor.parallel``'s own styles, as TorchTitan shards its Llama.

``tensor_parallel(model, mesh)`` splits every attention and MLP projection over ``mesh``
(column-wise in, row-wise out); with ``sequence=True`` the norms, the embedding's output and
the residual stream are sharded along the sequence between them (``SequenceParallel``), so
that a layer all-gathers its input and reduce-scatters its output instead of all-reducing.
Compose with FSDP2 over another mesh dimension for FSDP x TP. The model's key/value heads must
divide by the mesh size (the zoo's Llama has two: TP over 2 chips).
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)


def llama(seed: int = 0) -> tuple[torch.nn.Module, dict]:
    """The zoo's tiny Llama (CPU, training mode) and its inputs."""
    from .models import ENTRIES

    entry = next(e for e in ENTRIES if e.name == "llama")
    torch.manual_seed(seed)
    return entry.build(), entry.inputs()


def tensor_parallel(model: torch.nn.Module, mesh, sequence: bool = True) -> torch.nn.Module:
    """Shards a Hugging Face Llama (``LlamaForCausalLM``) over the 1-D ``mesh`` in place."""
    heads = model.config.num_key_value_heads
    if heads % mesh.size() != 0:
        raise ValueError(
            f"tensor parallelism over {mesh.size()} chips needs the key/value heads ({heads}) "
            "to divide among them"
        )
    if sequence:
        parallelize_module(model.model, mesh, {
            # The residual stream stays a DTensor sharded along the sequence: positions and
            # masks are computed from its global shape.
            "embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1),
                                            use_local_output=False),
            "norm": SequenceParallel(),
        })
        parallelize_module(model, mesh, {
            "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())})
    out = dict(output_layouts=Shard(1), use_local_output=False) if sequence else {}
    for layer in model.model.layers:
        plan = {
            "self_attn.q_proj": ColwiseParallel(),
            "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(),
            "self_attn.o_proj": RowwiseParallel(**out),
            "mlp.gate_proj": ColwiseParallel(),
            "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel(**out),
        }
        if sequence:
            plan.update({
                "input_layernorm": SequenceParallel(),
                "post_attention_layernorm": SequenceParallel(),
                "self_attn": PrepareModuleInput(
                    input_kwarg_layouts={"hidden_states": Shard(1)},
                    desired_input_kwarg_layouts={"hidden_states": Replicate()}),
                "mlp": PrepareModuleInput(input_layouts=(Shard(1),),
                                          desired_input_layouts=(Replicate(),)),
            })
        parallelize_module(layer, mesh, plan)
    return model
