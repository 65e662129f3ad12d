"""Test setup: the Triton interpreter on CPU-only machines, and poisoned fresh allocations.

TRITON_INTERPRET must be set before any @triton.jit runs at import, so it is set here, first.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def device() -> str:
    return DEVICE


@pytest.fixture(autouse=True)
def poison_fresh_outputs(monkeypatch):
    """torch.empty / torch.empty_like return NaN-filled floating tensors, so an element a kernel
    forgets to write fails the comparison instead of passing on leftover memory."""
    real_empty, real_empty_like = torch.empty, torch.empty_like

    def poisoned(tensor):  # a leaf that requires grad (e.g. inductor's own example inputs) is no kernel's output
        return tensor.fill_(float("nan")) if tensor.is_floating_point() and not tensor.requires_grad else tensor

    monkeypatch.setattr(torch, "empty", lambda *a, **kw: poisoned(real_empty(*a, **kw)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **kw: poisoned(real_empty_like(*a, **kw)))


@pytest.fixture(autouse=True)
def fresh_launch_plans():
    """Every test starts with no launch plan (variants/plan.py), so one that patches the block table or the
    registry under a signature an earlier test planned sees its own blocks."""
    import sys
    module = sys.modules.get("variants.plan")  # not imported: nothing planned yet (and nothing to import here)
    if module is not None:
        module.plans.clear()
    yield


@pytest.fixture
def figures(monkeypatch):
    """Every figure the plots save during the test, as (stem, figure), inspected before it is written and closed."""
    from plots import common

    seen = []
    real_save = common.save

    def spy(fig, out, stem, svg):
        seen.append((stem, fig))
        return real_save(fig, out, stem, svg)

    monkeypatch.setattr(common, "save", spy)
    return seen
