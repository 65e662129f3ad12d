"""Default blocks for an architecture without measured rows, chosen by compilation on a CPU (never timed).

    python -m runners.arch_defaults --arch sm80,sm86,sm89,sm100,sm120 [--variants two_pass,atomic] \
        [--head-dims 64,128,256]

Per architecture, Triton design of the registry and head-dim class (the rules' `head_dim_max` 64, 128, then `{}`
for the rest, searched at 256): start from the Hopper ("9.0") rule for that head dim (bf16, not causal), with
the boolean fields the design cannot use there turned off (Variant.arch_reason: atomic_tma's TMA below sm90),
and compile it (runners.compile_check) not causal, then causal. While a kernel fails, shrink the fields of that
kernel (Blocks.field_kernels; a design whose fields name no kernel: all of them):
  shared memory too big  -> one pipeline stage less, else the largest BLOCK_* halved;
  spills                 -> 8 warps where it has 4, else the largest BLOCK_* halved;
  anything else          -> the largest BLOCK_* halved.
The first config whose kernels all compile without spills (the shared delta kernel's excepted: no block changes
it) and fit shared memory is the rule; printed as the
YAML of a conf/block_defaults.yaml section, each rule marked `source: compile_checked`. A design that cannot
run on the architecture at all (ws below / above sm90) gets no rules there; one for which no config passes gets
its smallest tried config, marked `# not clean: ...`.
"""
import argparse
import sys

from runners.compile.arch_limits import ArchError, parse_archs

HEAD_DIM_CLASSES = (64, 128, 256)  # the last one's rule is `when: {}`


def stock_designs() -> list[str]:
    """The registry's Triton designs that ship with the repo (variants/), in registration order."""
    from variants import get
    from variants.base import TritonVariant
    from variants.registry import registered

    return [name for name in registered() if isinstance(get(name), TritonVariant)
            and type(get(name)).__module__.startswith("variants.")]


def hopper_blocks(variant: str, head_dim: int) -> dict:
    import torch

    from variants.block_defaults import default_block_fields
    from variants.problem import Problem
    probe = Problem(1, 4096, 4096, 16, 16, head_dim, False, torch.bfloat16, "cpu")
    return default_block_fields(variant, probe, arch="9.0")


def runnable_start(variant: str, blocks: dict, capability: int) -> dict | None:
    """`blocks` with the boolean fields turned off that keep the design from running there, or None."""
    from variants import get
    impl = get(variant)
    blocks = impl.Blocks.from_dict(blocks).as_dict()  # every field: the causal rule's extras never leak in
    if impl.arch_reason(capability, impl.Blocks.from_dict(blocks)) is None:
        return blocks
    for name, value in dict(blocks).items():
        if value is True:
            blocks = {**blocks, name: False}
            if impl.arch_reason(capability, impl.Blocks.from_dict(blocks)) is None:
                return blocks
    return None


def shrink(variant: str, blocks: dict, row: dict) -> dict | None:
    """The next config to try after `row` (a compile_check row of a failing kernel), or None."""
    from variants import get
    cls = get(variant).Blocks
    current = cls.from_dict(blocks).as_dict()
    tagged = cls.field_kernels()
    mine = [f for f, k in tagged.items() if k == row["kernel"]] or [f for f, k in tagged.items() if k is None]
    status, spills = str(row["status"]), int(row.get("spill_store_bytes") or 0)
    steps = []
    if status.startswith("OutOfResources: shared memory"):
        steps += [{f: current[f] - 1} for f in mine if f.startswith("num_stages") and current[f] > 1]
    elif status == "ok" and spills:
        steps += [{f: 8} for f in mine if f.startswith("num_warps") and current[f] < 8]
    sizes = sorted((f for f in mine if f.startswith("BLOCK_")), key=lambda f: -current[f])
    steps += [{f: current[f] // 2} for f in sizes if current[f] > 16]
    for step in steps:
        try:
            cls.from_dict({**blocks, **step})
        except ValueError:  # a combination rule (fused: BLOCK_M1 / BLK_SLICE_FACTOR >= 16)
            continue
        return {**blocks, **step}
    return None


def shared_kernels() -> set[str]:
    """The kernels every Triton design launches whatever its blocks (kernels/preprocess.py: the delta rowsum):
    their spills are no block rule's to fix (ptxas-blackwell spills the delta kernel at some head dims)."""
    from triton.runtime.jit import KernelInterface  # JITFunction, or InterpretedFunction under TRITON_INTERPRET=1

    from kernels import preprocess
    return {v.__name__ for v in vars(preprocess).values() if isinstance(v, KernelInterface)}


def failing(rows: list[dict]) -> dict | None:
    """The first row of a block-dependent kernel that is not clean: not ok, or spilling."""
    shared = shared_kernels()
    return next((r for r in rows if r["status"] != "ok"
                 or (int(r["spill_store_bytes"] or 0) > 0 and r["kernel"] not in shared)), None)


def search(variant: str, head_dim: int, arch, log=print) -> tuple[dict | None, str]:
    """(the first clean blocks, '') or (the last tried, why it is not clean), or (None, why) when the design cannot
    run on that architecture."""
    from runners.compile.resources import check
    blocks = runnable_start(variant, hopper_blocks(variant, head_dim), arch.capability)
    if blocks is None:
        return None, f"{variant} cannot run on {arch.name}"
    while True:
        bad = None
        for causal in (False, True):
            rows = check(variant, head_dim, "bf16", causal, 16, 16, blocks, arch=arch)
            bad = failing(rows)
            if bad:
                break
        if bad is None:
            log(f"  {arch.name} {variant} D{head_dim}: clean {blocks}")
            return blocks, ""
        why = (f"{bad['kernel']} {'causal ' if causal else ''}{bad['status']}, "
               f"{bad['spill_store_bytes'] or 0} B spill stores")
        log(f"  {arch.name} {variant} D{head_dim}: {blocks} -> {why}")
        smaller = shrink(variant, blocks, bad)
        if smaller is None:
            return blocks, why
        blocks = smaller


def _not_default(variant: str, blocks: dict) -> dict:
    """The fields that differ from the Blocks dataclass defaults, plus every BLOCK_* / num_* (the tile, always shown)."""
    from variants import get
    defaults = get(variant).Blocks().as_dict()
    return {k: v for k, v in blocks.items() if v != defaults[k] or k.startswith(("BLOCK_", "num_"))}


def rules_yaml(arch, found: dict) -> str:
    """A conf/block_defaults.yaml section: {variant: [(head_dim, blocks, why)]} -> YAML text."""
    import yaml
    lines = [f'"{arch.table_key}":  # {arch.name} ({arch.example}): compile-checked on a CPU (runners.arch_defaults), '
             "not measured"]
    for variant, rules in found.items():
        lines.append(f"  {variant}:")
        for head_dim, blocks, why in rules:
            when = "{}" if head_dim == HEAD_DIM_CLASSES[-1] else f"{{head_dim_max: {head_dim}}}"
            flow = yaml.safe_dump(_not_default(variant, blocks), default_flow_style=True, sort_keys=False,
                                  width=10**6).strip()
            note = f"  # not clean: {why}" if why else ""
            lines.append(f"    - when: {when}")
            lines.append(f"      blocks: {flow}")
            lines.append(f"      source: compile_checked{note}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="sm80,sm86,sm89,sm100,sm120")
    parser.add_argument("--variants", help="comma list (default: the registry's stock Triton designs)")
    args = parser.parse_args(argv)
    try:
        archs = parse_archs(args.arch)
    except ArchError as exc:
        print(f"arch_defaults: {exc}", file=sys.stderr)
        return 2
    from runners.compile.resources import use_compiler_not_interpreter
    use_compiler_not_interpreter()
    designs = args.variants.split(",") if args.variants else stock_designs()
    for arch in archs:
        found = {}
        for variant in designs:
            rules = []
            for head_dim in HEAD_DIM_CLASSES:
                blocks, why = search(variant, head_dim, arch, log=lambda text: print(text, file=sys.stderr, flush=True))
                if blocks is not None:
                    rules.append((head_dim, blocks, why))
            if rules:
                found[variant] = rules
        print(rules_yaml(arch, found), flush=True)
    return 0

