"""Which forward produces O and the base-2 LSE that a backward design reads (issue 42): a choice a point names.

    stock       kernels/forward.py, the Triton forward every design has shared
    gluon       kernels/gluon/forward.py (sm90, FA3's structure); a problem it does not cover runs the stock
                forward, and `chosen_forward` says why
    gluon.<v>   gluon with the variant v of kernels.gluon.forward_variants.FORWARD_VARIANTS (gluon.pp3_lpt)
    auto        gluon where it covers the problem on an sm90 GPU and is the faster there, else stock (the default:
                CPU, the interpreter and other GPUs run stock, as before; `auto_runs_stock` the measured exceptions)
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
    name: str  # the forward that runs: "stock", "gluon", "gluon.<variant>" or a baseline's name (BASELINE_FORWARDS)
    reason: str  # why a request for another forward runs stock ('' when it runs what was asked)


def check_forward(choice: str) -> str:
    """choice, or a one-line ValueError naming the choices; gluon.<variant> is checked against FORWARD_VARIANTS
    (imported only for a choice with a dot: importing Gluon is slow, and the host path checks every choice)."""
    if "." in choice:
        from kernels.gluon.forward_variants import FORWARD_VARIANTS
        if gluon_variant(choice) not in FORWARD_VARIANTS:
            raise ValueError(f"forward={choice!r}: gluon.<variant>, the variant one of {', '.join(FORWARD_VARIANTS)}")
        return choice
    if choice not in FORWARDS:
        raise ValueError(f"forward={choice!r}: one of {', '.join(FORWARDS)}")
    return choice


def gluon_variant(name: str) -> str | None:
    """The Gluon forward variant a name picks (gluon.pp3_lpt -> pp3_lpt); None for any other name (gluon itself
    runs the head dim's preferred_blocks)."""
    return name.partition(".")[2] if name.startswith("gluon.") else None


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
    if reason is not None:
        return ForwardRun("stock", reason)
    reason = auto_runs_stock(q.shape[-1], mods) if choice == "auto" else ""
    if reason:
        return ForwardRun("stock", reason)
    variant = gluon_variant(choice)
    if variant is None:
        return ForwardRun("gluon", "")
    from kernels.gluon.forward_variants import variant_blocks
    if variant_blocks(variant, q.shape[-1], causal) is None:
        return ForwardRun("stock", f"the Gluon forward variant {variant} runs tile D <= 64 only, not head dim "
                                   f"{q.shape[-1]}")
    return ForwardRun(choice, "")


def auto_runs_stock(head_dim: int, mods) -> str:
    """Why forward=auto runs the stock forward on a problem the Gluon forward covers ('' where it runs Gluon): softcap
    at tile D <= 64, where every Gluon structure is slower (H200 bf16, tokens 16384, N 4096 / 16384, softcap 30: the
    stock forward 1.13-1.24x the best of pp2 / pp2_lazy* / pp3_persistent*; results/h200/forward_modifiers). Its tanh
    costs two more MUFU ops a score (exp2, the division) beside P's exp2, against a 64-wide QK^T and PV."""
    if mods is not None and mods.softcap > 0 and head_dim <= 64:  # tile D <= 64
        return "auto: softcap at head dim <= 64 runs the stock forward (faster than the Gluon forward there)"
    return ""


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
    if ran == "gluon" or gluon_variant(ran):  # gluon: the head dim's preferred variant; gluon.<variant>: that one
        from kernels.gluon.forward import gluon_attention_forward
        from kernels.gluon.forward_variants import preferred_blocks, variant_blocks
        variant = gluon_variant(ran)
        blocks = variant_blocks(variant, q.shape[-1], causal) if variant \
            else preferred_blocks(q.shape[-1], causal, k.shape[1])
        return gluon_attention_forward(q, k, v, causal, scale, blocks, mods, varlen)
    from kernels.forward import attention_forward
    return attention_forward(q, k, v, causal, scale, BLOCK_N=BLOCK_N, varlen=varlen, mods=mods, gate=gate, sink=sink)
