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
    """Whether a rule's `when` (head_dim, head_dim_max, seq_min, causal, dtype, varlen (a packed batch), and the score
    modifiers windowed / softcap as booleans; a missing key matches) covers the problem. head_dim_max bounds the larger
    of the query / key head dim and V's (issue 47: 64 / 128 takes D128's tiles, whose V, dO and dV tiles it has);
    head_dim is the query / key head dim exactly (a rule for one head dim, e.g. D96's head_dim_split), head_dim_v
    V's exactly (e.g. MLA's 192 / 128, where a second Q / dO stage fits); group_min: the GQA group H / Hkv at
    least (1 without GQA)."""
    softcapped = getattr(problem, "softcap", 0.0) > 0
    windowed = getattr(problem, "windowed", False)
    varlen = getattr(problem, "is_varlen", False)
    value_dim = getattr(problem, "value_dim", problem.head_dim)
    widest = max(problem.head_dim, value_dim)
    return (widest <= when.get("head_dim_max", widest)
            and when.get("head_dim", problem.head_dim) == problem.head_dim
            and when.get("head_dim_v", value_dim) == value_dim
            and rule_seq(problem) >= when.get("seq_min", 0)
            and when.get("causal", problem.causal) == problem.causal
            and when.get("dtype", DTYPE_NAMES.get(problem.dtype)) == DTYPE_NAMES.get(problem.dtype)
            and when.get("softcap", softcapped) == softcapped
            and when.get("windowed", windowed) == windowed
            and when.get("varlen", varlen) == varlen
            and problem.heads // problem.kv_heads >= when.get("group_min", 1))


def default_block_rule(variant: str, problem: Problem, table: dict | None = None,
                       arch: str | None = None) -> dict | None:
    """The first rule of `variant` that holds for the problem on `arch` (a table key such as "8.0"; default: the
    problem's device, `architecture`), or None when the variant has no rules there (a new design not yet tuned:
    it runs on its Blocks dataclass defaults). A variant that has rules there but none that holds is a ValueError
    (a gap in its rules). An architecture without a table of its own uses `any`."""
    table = load_table() if table is None else table
    arch = architecture(problem) if arch is None else arch
    rules = (table.get(arch) or table["any"]).get(variant) or []
    if not rules:
        return None
    for rule in rules:
        if rule_holds(rule.get("when") or {}, problem):
            return rule
    raise ValueError(f"{TABLE_PATH.name}: no rule for variant {variant!r} on {arch} "
                     f"(head_dim={problem.head_dim}, causal={problem.causal}, dtype={DTYPE_NAMES.get(problem.dtype)})")


def default_block_fields(variant: str, problem: Problem, table: dict | None = None, arch: str | None = None) -> dict:
    """The block fields of `default_block_rule` ({} where the variant has no rules on that architecture)."""
    rule = default_block_rule(variant, problem, table, arch)
    return dict(rule["blocks"]) if rule else {}


def rule_source(rule: dict | None) -> str:
    """Where a rule's blocks come from: `measured` (timed on a GPU; the default), `compile_checked` (chosen by
    runners.compile_check on a CPU: no spills, fits shared memory, never timed), or `dataclass` (no rule)."""
    return "dataclass" if rule is None else str(rule.get("source", "measured"))
