"""The per-architecture default block table (conf/block_defaults.yaml)."""
import pytest
import torch

from variants import TritonVariant, get, names
from variants.block_defaults import default_block_fields, load_table
from variants.problem import DTYPES, Problem

TRITON_VARIANTS = [name for name in names() if isinstance(get(name), TritonVariant)]  # the registry's designs


def problem(head_dim=64, causal=False, dtype=torch.bfloat16, device="cpu", seq=128):
    return Problem(1, seq, seq, 2, 2, head_dim, causal, dtype, device)


@pytest.mark.parametrize("arch", list(load_table()))  # every architecture's section and `any`
@pytest.mark.parametrize("variant", TRITON_VARIANTS)
def test_every_problem_gets_valid_blocks(arch, variant):
    """Every head dim 1..256 x causal x dtype has a rule, and its blocks pass the variant's validation."""
    table = {"any": load_table()[arch]}  # look the architecture's rules up as if on that device
    impl = get(variant)
    for head_dim in range(1, 257):
        for causal in (False, True):
            for dtype in DTYPES.values():
                for seq in (128, 16384):  # below and above every `seq_min`
                    fields = default_block_fields(variant, problem(head_dim, causal, dtype, seq=seq), table)
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


def test_seq_min_compares_the_longer_of_nq_and_nk_and_a_packed_batchs_longest_document():
    table = {"any": {"atomic": [{"when": {"seq_min": 8192}, "blocks": {"BLOCK_M": 64}},
                                {"when": {}, "blocks": {"BLOCK_M": 32}}]}}
    def fields(p):
        return default_block_fields("atomic", p, table)["BLOCK_M"]
    assert fields(problem(seq=8191)) == 32 and fields(problem(seq=8192)) == 64
    assert fields(Problem(1, 128, 8192, 2, 2, 64, False, torch.bfloat16, "cpu")) == 64  # Nk decides here
    assert fields(Problem(1, 9000, 128, 2, 2, 64, True, torch.bfloat16, "cpu")) == 64
    assert fields(Problem.packed((100, 8192), (100, 8192), 2, 2, 64, True, torch.bfloat16, "cpu")) == 64
    assert fields(Problem.packed((4000, 4000, 4000), (4000,) * 3, 2, 2, 64, True, torch.bfloat16, "cpu")) == 32


def test_hopper_causal_rules_split_at_8192():
    table = {"any": load_table()["9.0"]}
    for head_dim in (64, 128):
        short = default_block_fields("two_pass", problem(head_dim, True, seq=4096), table)
        long = default_block_fields("two_pass", problem(head_dim, True, seq=16384), table)
        assert short != long and long == default_block_fields("two_pass", problem(head_dim, True, seq=8192), table)
        full = default_block_fields("two_pass", problem(head_dim, False, seq=16384), table)
        assert full == default_block_fields("two_pass", problem(head_dim, False, seq=128), table)


def test_no_rule_is_a_one_line_error():
    with pytest.raises(ValueError, match="no rule for variant 'atomic' on any"):
        default_block_fields("atomic", problem(), {"any": {"atomic": [{"when": {"causal": True}, "blocks": {}}]}})


def test_every_design_is_covered():
    assert {"two_pass", "atomic", "fused", "atomic_tma"} <= set(TRITON_VARIANTS)


def test_variants_take_their_defaults_from_the_table():
    p = problem(128, True)
    assert get("two_pass").default_blocks(p).as_dict() == {**default_block_fields("two_pass", p), "longest_first": False,
                                                    "prescale": False, "split_dkdv": False, "split_d": False}


def test_a_design_without_rules_runs_on_its_dataclass_defaults():
    """No rules for a variant on the architecture: {} from the table, the Blocks dataclass defaults from the variant;
    rules of which none holds stay an error (test_no_rule_is_a_one_line_error)."""
    from variants import TritonVariant
    from variants.blocks import AtomicBlocks

    assert default_block_fields("new_design", problem(), {"any": {"atomic": []}}) == {}
    assert default_block_fields("atomic", problem(), {"any": {"atomic": []}}) == {}
    assert default_block_fields("atomic", problem(), {"9.0": {}, "any": {}}) == {}

    class NewDesign(TritonVariant):
        name = "no_rules_design"  # not registered, not in conf/block_defaults.yaml
        Blocks = AtomicBlocks
    for p in (problem(), problem(256, True, torch.float16, seq=16384)):
        assert NewDesign().default_blocks(p) == AtomicBlocks()
        assert NewDesign().make_blocks(p, {"BLOCK_M": 32}) == AtomicBlocks(BLOCK_M=32)
