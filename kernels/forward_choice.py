"""Which forward produces O and the base-2 LSE that a backward design reads (issue 42): a choice a point names.

    stock       kernels/forward.py, the Triton forward every design has shared
    gluon       kernels/gluon/forward.py (sm90, FA3's structure); a problem it does not cover runs the stock
                forward, and `chosen_forward` says why
    auto        gluon where it covers the problem on an sm90 GPU, else stock (the default: CPU, the interpreter and
                other GPUs run stock, as before)
    sdpa_flash  SDPA's FlashAttention-2 forward, sdpa_cudnn cuDNN's, fa4 FlashAttention-4's
                (kernels/forward_baselines.py); a call one cannot run runs stock, with the reason

All write the same convention: o like q, lse [B, H, Nq] fp32 = log2 of the sum of exp2(s * scale * log2 e) per row,
+inf (and O = 0) for a row that sees no key.
"""
from typing import NamedTuple

from kernels.forward_baselines import BASELINE_FORWARDS
from kernels.launch import memo

FORWARDS = ("stock", "gluon", "auto", *BASELINE_FORWARDS)
DEFAULT_FORWARD = "auto"  # Gluon on sm90 where it covers the problem, else stock (docs/forward.md)


class ForwardRun(NamedTuple):
    name: str  # the forward that runs: "stock", "gluon" or a baseline's name (BASELINE_FORWARDS)
    reason: str  # why a request for another forward runs stock ('' when it runs what was asked)


def check_forward(choice: str) -> str:
    """choice, or a one-line ValueError naming the choices."""
    if choice not in FORWARDS:
        raise ValueError(f"forward={choice!r}: one of {', '.join(FORWARDS)}")
    return choice


def chosen_forward(choice: str, q, k, v, causal: bool, *, varlen=None, mods=None, gate=None,
                   sink=None) -> ForwardRun:
    """The forward `choice` runs for this call (q [B, Nq, H, D] or packed [1, total, H, D]; v's head dim Dv may
    differ, issue 47) and, where the forward asked for cannot run this call, the reason (the stock forward runs)."""
    if check_forward(choice) == "stock":
        return ForwardRun("stock", "")
    if choice in BASELINE_FORWARDS:
        reason = BASELINE_FORWARDS[choice].reason(q, k, v, causal, varlen=varlen, mods=mods, gate=gate, sink=sink)
        return ForwardRun("stock", reason) if reason is not None else ForwardRun(choice, "")
    if v.shape[-1] != q.shape[-1]:
        return ForwardRun("stock", f"the Gluon forward takes V's head dim equal to Q's, not {v.shape[-1]} != "
                                   f"{q.shape[-1]}")
    if sink is not None:
        return ForwardRun("stock", "the Gluon forward has no learnable sink yet")
    from kernels.gluon.forward import forward_reason
    reason = forward_reason(q, k, v, causal, varlen=varlen, mods=mods, gate=gate)
    if reason is None:
        return ForwardRun("gluon", "")
    return ForwardRun("stock", reason)


def run_forward(choice: str, q, k, v, causal: bool, scale: float, *, BLOCK_N: int = 64, varlen=None, mods=None,
                gate=None, sink=None):
    """(o [B, Nq, H, Dv], lse [B, H, Nq] fp32 base 2) from the chosen forward; q [B, Nq, H, D], k [B, Nk, Hkv, D],
    v [B, Nk, Hkv, Dv] (varlen: [1, total, H, D] and a kernels.varlen.Packing). BLOCK_N: the stock forward's key
    block. sink: fp32 [H] or None (the stock forward only; the LSE carries it)."""
    slot = memo("run_forward") if varlen is None else None  # a plan's phase: its key fixes the choice (issue 44)
    ran = slot.get("ran") if slot else None
    if ran is None:
        ran = chosen_forward(choice, q, k, v, causal, varlen=varlen, mods=mods, gate=gate, sink=sink).name
        if slot is not None:
            slot["ran"] = ran
    if ran in BASELINE_FORWARDS:
        return BASELINE_FORWARDS[ran].run(q, k, v, causal, scale, mods)
    if ran == "gluon":
        from kernels.gluon.forward import gluon_attention_forward
        from kernels.gluon.forward_variants import preferred_blocks
        return gluon_attention_forward(q, k, v, causal, scale, preferred_blocks(q.shape[-1], causal))
    from kernels.forward import attention_forward
    return attention_forward(q, k, v, causal, scale, BLOCK_N=BLOCK_N, varlen=varlen, mods=mods, gate=gate, sink=sink)
