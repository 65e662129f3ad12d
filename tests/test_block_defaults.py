"""The per-architecture default block table (conf/block_defaults.yaml)."""
import pytest
import torch

from variants import get
from variants.block_defaults import default_block_fields, load_table
from variants.problem import DTYPES, Problem

TRITON_VARIANTS = ["two_pass", "atomic", "fused"]


def problem(head_dim=64, causal=False, dtype=torch.bfloat16, device="cpu"):
    return Problem(1, 128, 128, 2, 2, head_dim, causal, dtype, device)


@pytest.mark.parametrize("arch", ["9.0", "any"])
@pytest.mark.parametrize("variant", TRITON_VARIANTS)
def test_every_problem_gets_valid_blocks(arch, variant):
    """Every head dim 1..256 x causal x dtype has a rule, and its blocks pass the variant's validation."""
    table = {"any": load_table()[arch]}  # look the architecture's rules up as if on that device
    impl = get(variant)
    for head_dim in range(1, 257):
        for causal in (False, True):
            for dtype in DTYPES.values():
                fields = default_block_fields(variant, problem(head_dim, causal, dtype), table)
                impl.Blocks(**fields).validate()


def test_first_matching_rule_wins_and_conditions_filter():
    table = {"any": {"atomic": [
        {"when": {"head_dim_max": 64, "dtype": "fp16"}, "blocks": {"BLOCK_M": 16}},
        {"when": {"causal": True}, "blocks": {"BLOCK_M": 32}},
        {"when": {}, "blocks": {"BLOCK_M": 64}},
    ]}}
    assert default_block_fields("atomic", problem(64, False, torch.float16), table) == {"BLOCK_M": 16}
    assert default_block_fields("atomic", problem(64, True, torch.bfloat16), table) == {"BLOCK_M": 32}
    assert default_block_fields("atomic", problem(96, False, torch.float16), table) == {"BLOCK_M": 64}


def test_no_rule_is_a_one_line_error():
    with pytest.raises(ValueError, match="no rule for variant 'atomic' on any"):
        default_block_fields("atomic", problem(), {"any": {"atomic": [{"when": {"causal": True}, "blocks": {}}]}})


def test_variants_take_their_defaults_from_the_table():
    p = problem(128, True)
    assert get("two_pass").default_blocks(p).as_dict() == {**default_block_fields("two_pass", p), "longest_first": False,
                                                    "prescale": False, "split_dkdv": False, "split_d": False}
