"""Fault-injection variants for the isolation tests and scripts/gpu_fault_isolation.sh. NOT in the product registry:
they exist only where this module is imported, e.g. by the runner's `plugins=[tests.fault_variants]`
(imported by the sweep process and by its worker) or by a test.

    python -m runners.sweep -m variant=reference 'variant.name=two_pass,fault_illegal_address,fault_hang' \
        'plugins=[tests.fault_variants]' isolate=true point_timeout_s=60

| name | what its backward does |
|---|---|
| fault_illegal_address | a Triton kernel stores through a wild pointer (address 64): on a GPU a sticky "illegal memory access" CUDA error; under the CPU interpreter a real SIGSEGV of the process |
| fault_hang | GPU: a Triton kernel spins on a flag that never changes; CPU: sleeps for an hour |
| fault_abort | os.abort(): the process dies by SIGABRT |
| fault_exit | os._exit(3): the process vanishes without a word |
| fault_cuda_error | raises the RuntimeError torch raises after an illegal address (a sticky CUDA error) without a GPU |
| fault_nan | returns NaN gradients: a `wrong` point, no fault |
"""
import os
import time

import torch
import triton
import triton.language as tl

from variants.base import Variant
from variants.registry import register_variant

WILD_ADDRESS = 64  # below Linux's mmap_min_addr and never a valid CUDA address


@triton.jit
def _wild_store(p_out, offset):
    tl.store(p_out + offset, 1.0)  # p_out + offset = WILD_ADDRESS: outside every allocation


@triton.jit
def _spin_until_set(p_flag, p_out):
    b_flag = tl.load(p_flag, volatile=True)
    while b_flag == 0:  # nothing ever sets the flag
        b_flag = tl.load(p_flag, volatile=True)
    tl.store(p_out, b_flag)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _Fault(Variant):
    """No forward of its own: prepare() returns a backward closure that fails in its own way."""

    def executed_flops(self, problem, blocks) -> float:
        return 0.0

    def prepare(self, q, k, v, do, causal, scale, blocks):
        return lambda: self.fault(q, k, v, do)

    def fault(self, q, k, v, do):
        raise NotImplementedError


@register_variant("fault_illegal_address")
class IllegalAddress(_Fault):
    def fault(self, q, k, v, do):
        out = torch.zeros(4, dtype=torch.float32, device=q.device)
        _wild_store[(1,)](out, WILD_ADDRESS // 4 - out.data_ptr() // 4)  # element offset to the wild address
        _sync(q.device)  # the illegal access surfaces here on a GPU
        return out, out, out


@register_variant("fault_hang")
class Hang(_Fault):
    def fault(self, q, k, v, do):
        if q.device.type != "cuda":
            time.sleep(3600)
        flag = torch.zeros(1, dtype=torch.int32, device=q.device)
        out = torch.zeros(1, dtype=torch.int32, device=q.device)
        _spin_until_set[(1,)](flag, out)
        _sync(q.device)  # never returns
        return q, k, v


@register_variant("fault_abort")
class Abort(_Fault):
    def fault(self, q, k, v, do):
        os.abort()


@register_variant("fault_exit")
class Exit(_Fault):
    def fault(self, q, k, v, do):
        os._exit(3)


@register_variant("fault_cuda_error")
class CudaError(_Fault):
    def fault(self, q, k, v, do):
        raise RuntimeError("CUDA error: an illegal memory access was encountered\n"
                           "CUDA kernel errors might be asynchronously reported at some other API call")


@register_variant("fault_nan")
class NaNGrads(_Fault):
    def fault(self, q, k, v, do):
        return (torch.full_like(q, float("nan")), torch.full_like(k, float("nan")), torch.full_like(v, float("nan")))
