"""Bound launches (kernels/launch.py, issue 44) on the CPU.

The interpreter has no CompiledKernel, so the bound path is tested with stand-ins: each kernel of two_pass wrapped
as a JIT function whose "compiled kernel" launcher runs the interpreted kernel with the positional values it is
handed. If the bound argument list were in the wrong order, or missed a value, the kernels would compute something
else (or fail), so equal gradients show the order. The order against Triton's real binder for sm90 (both Triton
versions) is scripts/bound_args_check.py, run here in a subprocess.
"""
import dataclasses
import inspect
import os
import subprocess
import sys

import pytest
import torch
import triton.language as tl

import kernels.dkdv_dq
import kernels.forward
import kernels.launch as launch_module
import kernels.preprocess
import variants.plan as plan_module
from kernels.launch import LaunchSites, bound_arguments, launch, parameters, stats
from variants import attention
from variants.plan import plans

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCKS = dict(BLOCK_M1=16, BLOCK_N1=16, BLOCK_M2=16, BLOCK_N2=16)


class _Param:
    def __init__(self, name, is_constexpr):
        self.name, self.is_constexpr = name, is_constexpr


class CompiledLike:
    """A CompiledKernel's launcher API; its launcher runs the interpreted kernel with every value positionally."""

    def __init__(self, jit):
        self.jit, self.function, self.packed_metadata, self.launches = jit, object(), object(), 0

    def launch_metadata(self, grid, stream, *args):
        return None

    @property
    def run(self):
        return self._launcher

    def _launcher(self, grid_x, grid_y, grid_z, stream, function, metadata, launch_metadata, enter, leave, *values):
        assert function is self.function and metadata is self.packed_metadata
        self.launches += 1
        if self.jit.real is not None:
            self.jit.real[(grid_x, grid_y, grid_z)](*values)


class JitLike:
    """A JIT function over an interpreted kernel: `[grid](...)` runs it and hands back a CompiledLike."""

    def __init__(self, real, fn=None):
        self.real = real
        self.signature = inspect.signature(fn or real.fn)
        self.params = [_Param(name, p.annotation is tl.constexpr or p.annotation == "tl.constexpr")
                       for name, p in self.signature.parameters.items()]
        self.pre_run_hooks = []
        self.compiled, self.jit_launches = CompiledLike(self), 0
        self.__name__ = getattr(fn or real.fn, "__name__", "kernel")

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.jit_launches += 1
            if self.real is not None:
                self.real[grid](*args, **kwargs)
            return self.compiled
        return run


class _Runtime:
    launch_enter_hook = None
    launch_exit_hook = None


class _Knobs:
    runtime = _Runtime()


@pytest.fixture
def fake_driver(monkeypatch):
    monkeypatch.setattr(launch_module, "ENABLED", True)  # the default; FLASH_BWD_BOUND_LAUNCHES=0 may have turned it off
    monkeypatch.setattr(launch_module, "driver_api", lambda: (lambda: 0, lambda device: 0, _Knobs))
    stats.reset()
    yield
    launch_module.VERIFY = False


@pytest.fixture
def bindable_plans(monkeypatch):
    """Plans built as on a GPU (bindable) although the interpreter runs the kernels."""
    build = plan_module.build
    monkeypatch.setattr(plan_module, "build", lambda *a: dataclasses.replace(build(*a), unbound_reason=None))


@pytest.fixture
def jit_like(monkeypatch):
    """two_pass's four kernels as JitLike stand-ins; {name: JitLike}."""
    wrapped = {}
    for module, name in ((kernels.forward, "_fwd_kernel"), (kernels.preprocess, "_delta_kernel"),
                         (kernels.dkdv_dq, "_dkdv_kernel"), (kernels.dkdv_dq, "_dq_kernel")):
        wrapped[name] = JitLike(getattr(module, name))
        monkeypatch.setattr(module, name, wrapped[name])
    return wrapped


def _inputs(seed=0, n=40):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, n, 2, 16, generator=gen, requires_grad=True)
    k, v = (torch.randn(1, n, 1, 16, generator=gen, requires_grad=True) for _ in range(2))
    do = torch.randn(1, n, 2, 16, generator=gen)
    return q, k, v, do


def _call(q, k, v, do):
    o = attention(q, k, v, causal=True, variant="two_pass", blocks=BLOCKS)
    return (o.detach(), *torch.autograd.grad(o, (q, k, v), do))


def test_bound_arguments_take_positional_then_named_then_defaults():
    def kernel(a, b, C: tl.constexpr, d=7, E: tl.constexpr = 3):
        pass
    fake = JitLike(None, kernel)
    params = parameters(fake)
    assert [name for name, _ in params] == ["a", "b", "C", "d", "E"]
    assert bound_arguments(params, ("x",), dict(b="y", C=1)) == ["x", "y", 1, 7, 3]
    assert launch_module.constexpr_values(fake, ["x", "y", 1, 7, 3]) == (1, 3)


def test_a_second_call_launches_through_the_bound_kernels_with_the_same_results(fake_driver, bindable_plans,
                                                                                jit_like):
    q, k, v, do = _inputs()
    expected = _call(q, k, v, do)  # the first call: Triton's path, every launch bound after it
    assert plans.builds == 1 and stats.jit == 4 and stats.binds == 4 and stats.bound == 0
    launch_module.VERIFY = True  # each bound launch checks its kernel and constexprs
    got = _call(q, k, v, do)
    assert plans.builds == 1 and plans.hits == 1  # nothing checked again
    assert stats.jit == 4 and stats.bound == 4  # forward, delta, dK/dV, dQ: all bound
    assert all(fake.jit_launches == 1 and fake.compiled.launches == 1 for fake in jit_like.values())
    for a, b in zip(expected, got):
        assert torch.equal(a, b)
    plan = next(iter(plans._plans.values()))
    assert {key[0] for key in plan.launches} == {"forward", "backward"}
    assert all(sites.mode == "bound" for sites in plan.launches.values())


def test_the_bound_path_matches_the_interpreter_without_plans(fake_driver, bindable_plans, jit_like):
    q, k, v, do = _inputs(seed=1)
    _call(q, k, v, do)
    bound = _call(q, k, v, do)
    assert stats.bound == 4
    from variants.op import through_operator
    with through_operator():  # the operator's path: no phase, Triton's launches
        reference = _call(q, k, v, do)
    for a, b in zip(bound, reference):
        assert torch.equal(a, b)


def test_another_do_layout_gets_its_own_backward_launches(fake_driver, bindable_plans, jit_like):
    q, k, v, do = _inputs(seed=2)
    _call(q, k, v, do)
    do_t = do.transpose(1, 2).contiguous().transpose(1, 2)  # same values, other strides
    got = _call(q, k, v, do_t)
    assert stats.bound == 1  # the forward bound; the backward recorded anew for dO's strides
    assert stats.jit == 4 + 3
    expected = _call(q, k, v, do)
    assert stats.bound == 1 + 4
    for a, b in zip(expected, got):
        assert torch.allclose(a, b, atol=1e-5)  # other strides, other summation order possible
    plan = next(iter(plans._plans.values()))
    assert sum(key[0] == "backward" for key in plan.launches) == 2


def test_a_new_signature_gets_a_new_plan_and_new_launches(fake_driver, bindable_plans, jit_like):
    q, k, v, do = _inputs(seed=3)
    _call(q, k, v, do)
    q2, k2, v2, do2 = _inputs(seed=3, n=24)
    _call(q2, k2, v2, do2)
    assert plans.builds == 2 and stats.bound == 0 and stats.binds == 8


def test_kernels_that_cannot_be_bound_stay_on_tritons_path_for_good(fake_driver, bindable_plans):
    q, k, v, do = _inputs(seed=4)
    expected = _call(q, k, v, do)  # the interpreter's functions: no CompiledKernel to bind
    got = _call(q, k, v, do)
    assert stats.bound == 0 and stats.binds == 0 and stats.jit == 4  # recorded once, then plain launches
    plan = next(iter(plans._plans.values()))
    assert all(sites.mode == "jit" and "no launcher API" in sites.reason for sites in plan.launches.values())
    for a, b in zip(expected, got):
        assert torch.equal(a, b)


def test_an_interpreter_plan_never_binds():
    q, k, v, do = _inputs(seed=5)
    stats.reset()
    _call(q, k, v, do)
    plan = next(iter(plans._plans.values()))
    assert plan.unbound_reason and not plan.launches and stats.jit == 0


def _unit_kernel(a, B: tl.constexpr):
    pass


def test_a_phase_that_launches_differently_raises_instead_of_running_the_wrong_kernel(fake_driver):
    first, second = JitLike(None, _unit_kernel), JitLike(None, _unit_kernel)
    sites = LaunchSites()
    with sites.phase():
        launch(first, (1,), 1, B=2)
    assert sites.mode == "bound"
    launch_module.VERIFY = True
    with pytest.raises(RuntimeError, match="constexprs"):
        with sites.phase():
            launch(first, (1,), 1, B=3)
    with pytest.raises(RuntimeError, match="mismatch"):
        with sites.phase():
            launch(second, (1,), 1, B=2)
    with pytest.raises(RuntimeError, match="mismatch"):
        with sites.phase():
            launch(first, (1,), 1, B=2)
            launch(first, (1,), 1, B=2)
    with sites.phase():
        launch(first, (1,), 5, B=2)
    assert first.jit_launches == 1 and first.compiled.launches >= 1
    assert launch(first, (1,), 1, B=2) is first.compiled and first.jit_launches == 2  # outside a phase: Triton's


def test_a_kernel_with_pre_run_hooks_is_not_bound(fake_driver):
    fake = JitLike(None, _unit_kernel)
    fake.pre_run_hooks = [lambda *a, **k: None]
    sites = LaunchSites()
    with sites.phase():
        launch(fake, (1,), 1, B=2)
    assert sites.mode == "jit" and "pre-run hooks" in sites.reason


def test_bound_arguments_match_tritons_binder_for_sm90():
    """Every launch of two_pass and ws (forward and backward, recorded) against Triton's binder; a fresh process."""
    run = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bound_args_check.py"),
                          "--variants", "two_pass,ws,ws_two_pass"], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "TRITON_INTERPRET": "0"}, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 failed" in run.stdout


def test_cached_tma_descriptors_equal_fresh_ones_but_for_the_base():
    """kernels/gluon/tiles.py: the second descriptor of a key copies the first's checked fields and takes the new
    base; the launcher reads only the base's data pointer, the same as the view's."""
    from kernels.gluon.compat import GLUON_MISSING
    if GLUON_MISSING:
        pytest.skip(GLUON_MISSING)
    from kernels.gluon import tiles
    tiles._DESCRIPTORS.clear()
    first, second = (torch.randn(1, 48, 2, 64, dtype=torch.bfloat16) for _ in range(2))
    fresh = tiles.rows_descriptor(first, 64)  # made by the constructor (on a view)
    cached = tiles.rows_descriptor(second, 64)  # copied from its fields
    assert type(cached) is type(fresh) and cached.base is second
    assert cached.base.data_ptr() == second.view(48, 2, 64).data_ptr()
    fields = lambda d: {k: v for k, v in d.__dict__.items() if k != "base"}  # noqa: E731
    assert fields(cached) == fields(fresh)
    assert fresh.shape == [48, 2, 64] and fresh.block_shape == [64, 1, 64]
    unaligned = torch.randn(1 * 48 * 2 * 64 + 1, dtype=torch.bfloat16)[1:].view(1, 48, 2, 64)
    with pytest.raises(AssertionError, match="aligned"):  # never copied: the constructor refuses it
        tiles.rows_descriptor(unaligned, 64)


def test_a_grid_given_as_a_function_is_not_bound(fake_driver):
    fake = JitLike(None, _unit_kernel)
    sites = LaunchSites()
    with sites.phase():
        launch(fake, lambda meta: (1,), 1, B=2)
    assert sites.mode == "jit" and "grid" in sites.reason


def test_bound_launches_turned_off_leave_triton_s_path(monkeypatch):
    """FLASH_BWD_BOUND_LAUNCHES=0: bind refuses with the reason, so a plan's sites stay on Triton's path."""
    monkeypatch.setattr(launch_module, "ENABLED", False)
    bound, reason = launch_module.bind(object(), object(), (), {})
    assert bound is None and "FLASH_BWD_BOUND_LAUNCHES=0" in reason


@pytest.mark.parametrize("value,enabled", [(None, True), ("1", True), ("0", False)])
def test_bound_launches_are_on_by_default(value, enabled):
    """The default (no variable) and FLASH_BWD_BOUND_LAUNCHES=1 turn them on, =0 turns them off (a fresh import)."""
    env = {key: val for key, val in os.environ.items() if key != "FLASH_BWD_BOUND_LAUNCHES"}
    if value is not None:
        env["FLASH_BWD_BOUND_LAUNCHES"] = value
    out = subprocess.run([sys.executable, "-c", "import kernels.launch as m; print(m.ENABLED)"], env=env,
                         capture_output=True, text=True, check=True, cwd=os.path.dirname(os.path.dirname(
                             os.path.abspath(__file__))))
    assert out.stdout.strip() == str(enabled)


def test_a_launchers_memo_is_per_phase_and_request(fake_driver):
    """kernels.launch.memo: None outside a phase; inside one, the n-th request of each run gets the same dict, and
    another phase's sites (another plan or dO layout) get their own."""
    from kernels.launch import memo
    assert memo("f") is None
    fake = JitLike(None, _unit_kernel)
    sites, other = LaunchSites(), LaunchSites()
    with sites.phase():
        first = memo("f")
        first["grid"] = (1,)
        assert memo("f") is not first  # the second request: its own memo
        launch(fake, (1,), 1, B=2)
    with sites.phase():
        assert memo("f") is first and memo("f") == {}
        launch(fake, (1,), 1, B=2)
    with other.phase():
        assert memo("f") == {} and memo("f") is not first
        launch(fake, (1,), 1, B=2)
    assert memo("f") is None


def test_a_new_signature_builds_new_memos_and_a_warm_call_adds_none(fake_driver, bindable_plans, jit_like):
    q, k, v, do = _inputs(seed=6)
    _call(q, k, v, do)
    plan = next(iter(plans._plans.values()))
    owners = sorted(owner for sites in plan.launches.values() for _, owner in sites.memos)
    # two_pass's own launchers take no memo; run_forward keeps the forward's choice
    assert owners == ["attention_delta", "attention_forward", "run_forward"]
    ids = {key: {slot: id(memo) for slot, memo in sites.memos.items()} for key, sites in plan.launches.items()}
    _call(q, k, v, do)
    assert {key: {slot: id(memo) for slot, memo in sites.memos.items()} for key, sites in plan.launches.items()} == ids
    q2, k2, v2, do2 = _inputs(seed=6, n=24)
    _call(q2, k2, v2, do2)
    plan2 = next(reversed(plans._plans.values()))
    assert plan2 is not plan and plans.builds == 2
    forward = [sites for key, sites in plan.launches.items() if key[0] == "forward"][0]
    forward2 = [sites for key, sites in plan2.launches.items() if key[0] == "forward"][0]
    slot, slot2 = ([memo for (_, owner), memo in sites.memos.items() if owner == "attention_forward"][0]
                   for sites in (forward, forward2))
    assert slot is not slot2 and slot["lse_shape"] == (1, 2, 40) and slot2["lse_shape"] == (1, 2, 24)


def test_warm_launches_from_the_memos_hand_each_kernel_what_the_full_path_does():
    """scripts/memo_check_cpu.py: every design's warm launches (ws and ws_two_pass included, stand-in kernels) against
    its first call's, over four signatures and two scales; a fresh process (@triton.jit without the interpreter)."""
    run = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "memo_check_cpu.py")], capture_output=True,
                         text=True, cwd=ROOT, env={**os.environ, "TRITON_INTERPRET": "0"}, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    assert '"failures": []' in run.stdout and '"checked": 0' not in run.stdout


def test_the_gluon_forwards_warm_launch_hands_its_kernel_what_the_full_path_does():
    """The same check with the Gluon forward (the sm90 default; issue 44: its launcher's phase memo) in place of the
    stock one: on the CPU its check would refuse the call, so the script makes it pass (--gluon-forward) and fails
    unless a Gluon forward launch is among those compared."""
    run = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "memo_check_cpu.py"), "ws,two_pass",
                          "--gluon-forward"], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "TRITON_INTERPRET": "0"}, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    assert '"failures": []' in run.stdout and '"checked": 0' not in run.stdout
