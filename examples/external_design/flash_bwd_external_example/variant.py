"""external_example: a stand-in backward. The fp32 reference computes dQ, dK, dV; a Triton kernel writes them out in
the input dtype. A real design launches its own kernels in run_backward."""
from dataclasses import dataclass

import torch

from flash_bwd_external_example.kernels import cast
from variants.base import TritonVariant
from variants.blocks import Blocks, tunable
from variants.reference import reference_grads
from variants.registry import register_variant


@dataclass(frozen=True)
class ExternalExampleBlocks(Blocks):
    BLOCK_SIZE: int = tunable(256, (128, 256))  # elements per program; tunable: what runners.tune and sweep=blocks try
    num_warps: int = tunable(4, (2, 4))


@register_variant("external_example")
class ExternalExample(TritonVariant):
    Blocks = ExternalExampleBlocks
    backward_matmuls = 5  # executed FLOPs: 5 [pair x D] matmuls per visible (query, key) pair
    test_blocks = {"BLOCK_SIZE": 128, "num_warps": 2}  # the tests' correctness matrix runs these
    as_operator = False  # this placeholder backward uses torch.autograd, which cannot run inside a PyTorch operator

    def run_backward(self, q, k, v, o, lse, do, delta, *, causal, scale, blocks):
        with torch.enable_grad():  # autograd's backward runs this with grad mode off; the reference needs it
            _, dq, dk, dv = reference_grads(q, k, v, do, causal, scale)  # fp32, shaped like q, k, v
        return tuple(cast(g, q.dtype, **blocks.as_dict()) for g in (dq, dk, dv))
