"""Per-architecture default block configs: the table in conf/block_defaults.yaml (plain YAML, not Hydra)."""
import functools
from pathlib import Path

import torch
import yaml

from variants.problem import DTYPES, Problem

TABLE_PATH = Path(__file__).resolve().parent.parent / "conf" / "block_defaults.yaml"
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}


@functools.cache
def load_table(path: Path = TABLE_PATH) -> dict:
    return yaml.safe_load(Path(path).read_text())


def architecture(problem: Problem) -> str:
    """The table key of the problem's device: its compute capability ("9.0"), or "any" off CUDA."""
    if problem.device == "cuda" and torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return f"{major}.{minor}"
    return "any"


def rule_seq(problem: Problem) -> int:
    """The length a rule's `seq_min` compares with: the longer of Nq and Nk (of a packed batch: its longest document)."""
    return max(problem.seq_q, problem.seq_k)


def rule_holds(when: dict, problem: Problem) -> bool:
    """Whether a rule's `when` (head_dim_max, seq_min, causal, dtype; a missing key matches) covers the problem."""
    return (problem.head_dim <= when.get("head_dim_max", problem.head_dim)
            and rule_seq(problem) >= when.get("seq_min", 0)
            and when.get("causal", problem.causal) == problem.causal
            and when.get("dtype", DTYPE_NAMES.get(problem.dtype)) == DTYPE_NAMES.get(problem.dtype))


def default_block_fields(variant: str, problem: Problem, table: dict | None = None) -> dict:
    """The block fields of the first rule of `variant` that holds for the problem, on its architecture.

    A variant with no rules on that architecture (a new design not yet tuned) gets {}: it runs on its Blocks
    dataclass defaults. A variant that has rules there but none that holds is a ValueError (a gap in its rules)."""
    table = load_table() if table is None else table
    arch = architecture(problem)
    rules = (table.get(arch) or table["any"]).get(variant) or []
    if not rules:
        return {}
    for rule in rules:
        if rule_holds(rule.get("when") or {}, problem):
            return dict(rule["blocks"])
    raise ValueError(f"{TABLE_PATH.name}: no rule for variant {variant!r} on {arch} "
                     f"(head_dim={problem.head_dim}, causal={problem.causal}, dtype={DTYPE_NAMES.get(problem.dtype)})")
