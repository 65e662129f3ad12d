"""runners.check: the realistic-shape accuracy tool, run here on a tiny shape through the interpreter."""
import torch

from runners.check import check_point
from tests.conftest import DEVICE
from variants import get


def test_correct_variant_is_ok():
    row = check_point("fused", 1, 37, 4, 2, 40, True, torch.float16, device=DEVICE)
    assert row["status"] == "ok" and row["rel_o"] < 5e-3 and row["rel_dq"] < 5e-3


def test_wrong_gradients_are_reported(monkeypatch):
    impl = get("two_pass")
    real = impl.run_backward

    def half_dq(*args, **kwargs):
        dq, dk, dv = real(*args, **kwargs)
        return dq * 0.5, dk, dv

    monkeypatch.setattr(impl, "run_backward", half_dq)
    row = check_point("two_pass", 1, 37, 4, 2, 40, True, torch.float16, device=DEVICE)
    assert row["status"] == "WRONG" and row["rel_dq"] > 0.1 and row["rel_dk"] < 5e-3
