"""Launch plans (issue 44): what a dense call of a Triton design resolves once per problem signature, not per call.

    plan = plans.dense(impl, q, k, v, causal, blocks_text, window_left, window_right, softcap, g, sink)

A signature is everything the checks and the block resolution read: the design, the block overrides (as the op's
text), causal, the score modifiers, and each tensor's shape, strides, dtype and device (the gate's too), plus whether
the interpreter is on. The first call of a signature builds its `Plan`: the checks (`Problem.from_tensors`, the gate,
`with_modifiers`, the design's `check`), the resolved, validated `Blocks` (`make_blocks`: the default table and the
overrides), the default scale and the strides the operator promises for dq, dk, dv; later calls of that signature
look it up in a bounded dict (least recently used out first) and re-validate nothing. `plans.builds` counts the
builds (tests/test_plan.py).

Who uses it: `attention()` (variants/__init__.py) on its eager path, and the operator's implementation
(variants/op.py: `_resolve`), so that a compiled graph's or a CUDA graph's real calls hit it too. Packed calls read
their cu_seqlens on the host every call (their problem depends on the lengths' values), so they are not planned.
"""
from collections import OrderedDict
from dataclasses import dataclass, field

import torch

from kernels.launch import LaunchSites
from variants.base import interpreter_on  # imported before this module (variants/__init__.py): no cycle
from variants.blocks import Blocks, blocks_from_text
from variants.problem import Modifiers, Problem, check_gate, check_sink

CACHE_SIZE = 128  # signatures kept; a model's layers share one per shape, a sweep's points one each


@dataclass(frozen=True)
class Plan:
    """One signature's resolved call: the design, its validated problem and blocks, and what only the signature
    decides (the default scale, the score modifiers the kernels take, the promised gradient strides)."""
    impl: object  # the TritonVariant
    problem: Problem
    blocks: Blocks
    mods: Modifiers
    default_scale: float  # 1 / sqrt(D)
    grad_strides: tuple  # torch.empty_like(t).stride() of q, k, v: the strides the operator's results carry
    # None: the launches can be bound (kernels/launch.py), else why not (the interpreter, CPU tensors); chosen once
    unbound_reason: str | None = None
    # the bound launches of each phase: ("forward", device) and ("backward", device, dO's strides, dtype, alignment)
    launches: dict = field(default_factory=dict, compare=False, repr=False)

    def sites(self, key: tuple) -> LaunchSites:
        """The launch sites of one phase of this plan (made on the phase's first call)."""
        sites = self.launches.get(key)
        if sites is None:
            sites = self.launches[key] = LaunchSites(self.unbound_reason is None, self.unbound_reason)
        return sites

    @property
    def causal(self) -> bool:
        return self.problem.causal

    def like(self, grad: torch.Tensor, which: int, of: torch.Tensor) -> torch.Tensor:
        """grad (of q, k or v: which = 0, 1, 2) in the strides the operator promises, copied only if they differ
        (variants.op._like, with the strides looked up instead of derived)."""
        if grad.stride() == self.grad_strides[which]:
            return grad
        out = torch.empty_like(of)
        out.copy_(grad)
        return out


def _tensor_key(t: torch.Tensor) -> tuple:
    """Shape, strides, dtype, device and whether the data is 16-byte aligned (Triton specializes pointers on it, so a
    bound launch is valid only for the alignment it was bound with)."""
    return t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % 16 == 0


def signature(impl, q, k, v, causal, blocks: str, window_left: int, window_right: int, softcap: float, g,
              sink=None) -> tuple:
    """The plan cache's key of a dense call (hashable; tensors by shape, strides, dtype and device)."""
    return (impl, blocks, bool(causal), _tensor_key(q), _tensor_key(k), _tensor_key(v),
            None if g is None else _tensor_key(g), window_left, window_right, float(softcap), interpreter_on(),
            None if sink is None else _tensor_key(sink))


def build(impl, q, k, v, causal, blocks: str, window_left: int, window_right: int, softcap: float, g,
          sink=None) -> Plan:
    """Every check and the block resolution of a dense call (one-line ValueError on anything wrong)."""
    from variants.base import default_scale
    if g is not None:
        check_gate(g, q)
    if sink is not None:
        check_sink(sink, q)
    problem = Problem.from_tensors(q, k, v, causal).with_modifiers((window_left, window_right), softcap,
                                                                   g is not None).with_sink(sink is not None)
    impl.check(problem)
    config = impl.make_blocks(problem, blocks_from_text(blocks))
    strides = tuple(torch.empty_like(t, device="meta").stride() for t in (q, k, v))  # dv like v: [B, Nk, Hkv, Dv]
    from variants.base import interpreter_on
    unbound = "the Triton interpreter has no compiled kernels" if interpreter_on() else \
        None if q.is_cuda else f"{q.device.type} tensors"
    return Plan(impl, problem, config, problem.mods, default_scale(problem.head_dim), strides, unbound)


class PlanCache:
    """Plans by signature, at most `size` of them (the least recently used goes first). `builds` counts the plans
    built, `hits` the calls that found theirs."""

    def __init__(self, size: int = CACHE_SIZE):
        self.size, self.builds, self.hits = size, 0, 0
        self._plans: OrderedDict = OrderedDict()

    def dense(self, impl, q, k, v, causal, blocks: str = "", window_left: int = -1, window_right: int = -1,
              softcap: float = 0.0, g=None, sink=None) -> Plan:
        """The plan of a dense call, built (and checked) on the signature's first call."""
        key = signature(impl, q, k, v, causal, blocks, window_left, window_right, softcap, g, sink)
        plan = self._plans.get(key)
        if plan is not None:
            self.hits += 1
            self._plans.move_to_end(key)
            return plan
        plan = build(impl, q, k, v, causal, blocks, window_left, window_right, softcap, g, sink)
        self.builds += 1
        self._plans[key] = plan
        if len(self._plans) > self.size:
            self._plans.popitem(last=False)
        return plan

    def clear(self) -> None:
        """Forget every plan (a test that changes the block table or the registry under the same signatures)."""
        self._plans.clear()
        self.builds = self.hits = 0

    def __len__(self) -> int:
        return len(self._plans)


plans = PlanCache()
