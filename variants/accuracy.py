"""How far a result is from the reference, and whether that is close enough for its dtype."""
from dataclasses import dataclass

import torch

# ||out - ref||_2 / ||ref||_2 accepted per input dtype: fp32 is exact math (tests); fp16/bf16
# carry the rounding of P and dS to the input dtype before the matmuls.
REL_TOL = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 3e-2}


@dataclass(frozen=True)
class Error:
    max_abs: float  # max |out - ref|
    rel: float  # ||out - ref||_2 / ||ref||_2 (NaN if out has NaN/inf)

    def ok(self, dtype: torch.dtype) -> bool:
        return self.rel <= REL_TOL[dtype]  # False for NaN


def error(out: torch.Tensor, ref: torch.Tensor) -> Error:
    diff = out.double() - ref.double()
    ref_norm = ref.double().norm().item()
    max_abs = diff.abs().max().item() if diff.numel() else 0.0
    rel = diff.norm().item() / ref_norm if ref_norm > 0 else diff.norm().item()
    if not torch.isfinite(out).all():
        rel = max_abs = float("nan")
    return Error(max_abs=max_abs, rel=rel)
