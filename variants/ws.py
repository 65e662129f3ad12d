"""ws: the FA3-structure backward on Hopper, written in Gluon (kernels/gluon/ws.py): K/V resident in shared
memory, Q/dO through a TMA ring, swap-AB wgmma so P^T and dS^T feed dV and dK from registers (or, swap_ab=false,
S = Q K^T with P and dS through shared memory: D64's 128 x 128 tiles), dQ by TMA reduce-add into an fp32
accumulator. sm90 only; it cannot run in the Triton interpreter."""
from kernels.gluon.compat import GLUON_MISSING
from kernels.gluon.config import named_handover_reason
from variants.base import TritonVariant, interpreter_on
from variants.blocks import WsBlocks, WsTwoPassBlocks
from variants.registry import register_variant

import dataclasses
import math

import torch

WS_DTYPES = (torch.float16, torch.bfloat16)
WS_HEAD_DIMS = (64, 96, 128, 192, 256)


@register_variant("ws")
class Ws(TritonVariant):
    Blocks = WsBlocks
    runs_in_interpreter = False  # Gluon: compiled for sm90 only (runners.compile_check checks it on a CPU)
    archs = (90,)
    arch_requirement = "sm90 (a Gluon kernel written for Hopper: wgmma, TMA, mbarriers)"

    supports_varlen = True  # packed documents: one program per (document, key block) and kv head
    modifiers = ("window", "softcap")  # a sliding window (the band's query blocks only), softcap; the gate: not yet

    def supports(self, problem):
        if self.modifier_reason(problem) or self.mla_reason(problem):  # softcap / gate; head_dim_v / sink
            return self.modifier_reason(problem) or self.mla_reason(problem)
        if GLUON_MISSING is not None:
            return GLUON_MISSING
        if interpreter_on() or problem.device != "cuda":
            return "ws is a Gluon design for sm90 GPUs: the Triton interpreter and CPUs cannot run it"
        major, minor = torch.cuda.get_device_capability()
        if major != 9:
            return self.arch_reason(10 * major + minor)
        return self.problem_reason(problem)

    @staticmethod
    def yielding_overrides(overrides: dict, base) -> dict:
        """overrides, plus what a default rule's fields yield to them: its group_split to deterministic mode (no
        partials), its named_handover to the fields it cannot run with (num_warps=4, deterministic, p_in_dq).
        base: the default blocks, or a function making them (called only where a rule's field could yield)."""
        if overrides.get("deterministic") and "group_split" not in overrides:
            overrides = {**overrides, "group_split": 1}
        if "named_handover" not in overrides:
            base = base() if callable(base) else base
            if getattr(base, "named_handover", False):  # ws only (ws_two_pass: no field)
                fields = {name: overrides.get(name, getattr(base, name))
                          for name in ("num_warps", "warp_specialize", "p_in_dq", "deterministic")}
                if named_handover_reason(**fields):
                    overrides = {**overrides, "named_handover": False}
        return overrides

    def make_blocks(self, problem, blocks=None):
        """The base's blocks, then the rules that need the problem: a default rule's group_split and named_handover
        yield to the overrides they cannot run with; chunk_tiles only where a head dim has two chunks
        of >= 64 columns (192); head_dim_split only at a head dim whose chunks it
        changes (D96), a one-line ValueError elsewhere (a sweep's `unsupported` row, a config the tuner filters)."""
        if isinstance(blocks, dict):
            blocks = self.yielding_overrides(blocks, lambda: self.default_blocks(problem))
        overrides = blocks
        blocks = super().make_blocks(problem, blocks)
        if blocks.head_dim_split and GLUON_MISSING is None:  # without Gluon, supports() refuses every problem
            from kernels.gluon.tiles import head_dim_split_reason
            reason = head_dim_split_reason(problem.head_dim)
            if reason:
                raise ValueError(reason)
        if getattr(blocks, "group_split", 1) > 1 and GLUON_MISSING is None:  # ws only (ws_two_pass: no field)
            from kernels.gluon.ws import group_split_reason
            reason = group_split_reason(problem.heads, problem.kv_heads, blocks.group_split)
            if reason and not (isinstance(overrides, dict) and "group_split" in overrides):
                # a default rule's split (conf/block_defaults.yaml, group_min) on a group it does not divide: the
                # largest split that does
                split = math.gcd(problem.heads // problem.kv_heads, blocks.group_split)
                blocks = dataclasses.replace(blocks, group_split=split)
            elif reason:
                raise ValueError(reason)
        if blocks.chunk_tiles and GLUON_MISSING is None:
            from kernels.gluon.tiles import chunk_tiles_reason
            reason = chunk_tiles_reason(problem.head_dim, problem.value_dim)
            if reason:
                raise ValueError(reason)
        return blocks

    def problem_reason(self, problem):
        if problem.dtype not in WS_DTYPES:
            return f"ws runs fp16 and bf16 (wgmma), not {problem.dtype}"
        if problem.head_dim not in WS_HEAD_DIMS:
            return f"ws covers head dims {WS_HEAD_DIMS} so far, not {problem.head_dim}"
        return self.modifier_reason(problem) or self.varlen_reason(problem) or self.mla_reason(problem)

    # issue 47: the backward reads the LSE, which carries the sink when the forward took it (the stock forward does;
    # forward=gluon / auto run stock for a call with a sink, kernels.forward_choice), and masks P to 0 where a row
    # sees no key (there LSE = the sink, not +inf); dsink is kernels.sink.sink_grad beside the delta, as for stock
    supports_sink = True
    # issue 47: V, dO and dV tiles of V's own head dim (WsConfig.DIM_V), dP = dO V^T reduced over it, from the same
    # covered head dims as D (MLA's 192 / 128)
    supports_head_dim_v = True

    def mla_reason(self, problem):
        """Issue 47: V's head dim must be one the tiles cover (WS_HEAD_DIMS), as D must."""
        if problem.value_dim != problem.head_dim and problem.value_dim not in WS_HEAD_DIMS:
            return (f"{self.name} covers value head dims {WS_HEAD_DIMS} so far, not {problem.value_dim} (head_dim "
                    f"{problem.head_dim}, head_dim_v {problem.value_dim})")
        return None

    def executed_flops(self, problem, blocks):
        if getattr(blocks, "deterministic", False):  # dK/dV kernel: S, dP, dV, dK; dQ pass: S, dP, dQ
            return problem.matmul_flops(7, 3)  # dP, dV; dP over Dv
        return problem.matmul_flops(5, 2)  # S, dP, dV, dK, dQ: 10 N^2 d (dP, dV over Dv)

    def workspace_bytes(self, problem, blocks):
        if getattr(blocks, "deterministic", False):
            return 0  # dq written once by the dQ pass
        dq_acc = 4 * problem.tokens_q * problem.heads * problem.head_dim  # fp32 dQ accumulator [B * H * Nq, D]
        split = getattr(blocks, "group_split", 1)
        if split == 1:
            return dq_acc
        partial_bytes = 4 if getattr(blocks, "fp32_partials", True) else problem.dtype.itemsize
        partials = problem.tokens_k * problem.kv_heads * split * (problem.head_dim + problem.value_dim)  # dK, dV
        return dq_acc + partial_bytes * partials

    def dq_workspace(self, q, blocks, varlen=None):
        """The fp32 dQ accumulator the TMA reduce-adds go into (kernels.gluon.ws.new_accumulator); none when
        deterministic (ws_two_pass's dQ kernel writes dq once)."""
        if blocks.deterministic:
            return None
        from kernels.gluon.ws import new_accumulator
        return new_accumulator(q, varlen)

    def run_backward(self, q, k, v, o, lse, do, delta, *, causal, scale, blocks, mods=None, varlen=None,
                     dq_acc=None):
        window = {} if mods is None else dict(window_left=mods.window_left, window_right=mods.window_right,
                                              softcap=mods.softcap)
        if blocks.deterministic:  # dQ by ws_two_pass's dQ kernel at its default tile: no atomics
            fields = blocks.as_dict()
            fields.pop("deterministic")
            fields.pop("group_split")  # check_rules pinned it to 1
            fields.pop("fp32_partials")
            fields.pop("named_handover")  # check_rules pinned it to false
            # the default rules' split_masked (measured with dQ reduce-adds) is not GPU-tested in this mode's two
            # kernels yet: they run one loop (an explicit ws_two_pass split_masked=true runs them split)
            fields["split_masked"] = False
            if window:
                raise ValueError("ws: deterministic=true has no window or softcap yet (ws_two_pass's dQ kernel does "
                                 "not implement them); use deterministic=false")
            from kernels.gluon.ws_dq import ws_two_pass_backward
            fields.pop("warp_specialize")  # check_rules pinned it
            return ws_two_pass_backward(q, k, v, do, lse, delta, causal=causal, scale=scale, dkdv_blocks=fields,
                                        dq_blocks=WsTwoPassBlocks.dq_tile_for(q.shape[-1]), varlen=varlen)
        from kernels.gluon.ws import ws_backward
        fields = blocks.__dict__.get("_kernel_fields")  # read once per (frozen) instance: a plan's serve every call
        if fields is None:
            fields = blocks.as_dict()
            fields.pop("deterministic")
            object.__setattr__(blocks, "_kernel_fields", fields)
        return ws_backward(q, k, v, do, lse, delta, causal=causal, scale=scale, varlen=varlen, dq_acc=dq_acc,
                           **fields, **window)
