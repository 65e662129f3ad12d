"""Fingerprints of the PTX every Triton and Gluon kernel compiles to for sm90, on a machine without a GPU.

    python scripts/ptx_fingerprint.py --out /tmp/before.json [--ptx-dir /tmp/before_ptx] [--variants two_pass,ws]
    python scripts/ptx_fingerprint.py --compare /tmp/before.json /tmp/after.json

A refactor that only moves code (kernel signatures grouped into tuples, helpers renamed) must not change what the
GPU runs: this compiles the forward and every backward launch of each design over a spread of problems (head dims,
causal, GQA, fp32, score modifiers, packed documents, each boolean block field flipped) and hashes the PTX with
line info and debug sections removed. Equal hashes before and after mean the same instructions, the same
specialization and the same parameter order, so no GPU A/B is needed. Launches are recorded, never run
(runners.compile.resources: JITFunction.run replaced by a recorder, compiled by Triton's binder).

`--variants gluon_forward` (opt-in, not in the default list) fingerprints the Gluon forward (kernels/gluon/forward.py,
issue 42) over the fp16 / bf16 cases it covers (window, softcap and packed documents among them): a refactor of
kernels/gluon/tiles.py must leave it unchanged too.
"""
import argparse
import dataclasses
import hashlib
import json
import os
import re
import sys
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CASES = [  # (name, head_dim, causal, dtype, heads, kv_heads, modifiers, varlen)
    ("d64", 64, False, "bf16", 4, 2, {}, False),
    ("d64_causal", 64, True, "bf16", 4, 2, {}, False),
    ("d128_causal_mha", 128, True, "fp16", 2, 2, {}, False),
    ("d96", 96, False, "bf16", 2, 1, {}, False),
    ("d192_causal", 192, True, "bf16", 2, 2, {}, False),
    ("d64_fp32", 64, True, "fp32", 2, 2, {}, False),
    ("window", 64, True, "bf16", 2, 2, {"window": 100}, False),
    ("softcap", 64, False, "bf16", 2, 2, {"softcap": 30.0}, False),
    ("gate", 64, True, "bf16", 2, 2, {"gate": True}, False),
    ("varlen_causal", 64, True, "bf16", 2, 2, {}, True),
    ("varlen_d128", 128, False, "bf16", 2, 1, {}, True),
]


def normalized(ptx: str) -> str:
    """The PTX without line info, debug sections and the debug labels of inlined calls ($L__tmpN: a helper function
    moves them), which all move with edits of the source that change no instruction."""
    ptx = ptx.split("\t.section\t.debug", 1)[0]
    return "\n".join(line for line in ptx.splitlines()
                     if not re.match(r"\s*\.(loc|file)\b", line) and not re.match(r"\$L__tmp\d+:$", line))


def _flipped_blocks(variant) -> list[tuple[str, dict]]:
    """('default', {}) and, per boolean block field, (field=value, {field: not default})."""
    out = [("default", {})]
    for field in dataclasses.fields(variant.Blocks):
        if field.type in (bool, "bool"):
            default = field.default if not isinstance(field.default, dataclasses._MISSING_TYPE) else None
            if isinstance(default, bool):
                out.append((f"{field.name}={not default}", {field.name: not default}))
    return out


def _launches(variant_name, case, overrides):
    """[(JITFunction, args, kwargs)] of the forward and the backward of one case, nothing executed."""
    import torch
    from triton.runtime.jit import JITFunction

    from kernels.varlen import Packing
    from runners.compile.resources import probe_problem
    from variants import get
    from variants.base import default_scale
    from variants.block_defaults import default_block_rule
    from variants.problem import DTYPES

    _, head_dim, causal, dtype_name, heads, kv_heads, modifiers, packed = case
    if variant_name == GLUON_FORWARD:
        return _gluon_forward_launches(case)
    variant = get(variant_name)
    probe = probe_problem(head_dim, dtype_name, causal, heads, kv_heads, modifiers)
    if packed:  # the packed batch below (documents 1, 129, 0, 382): the default rules of a packed problem (`varlen`)
        lens = (1, 129, 0, 382)
        probe = dataclasses.replace(probe, batch=len(lens), seq_q=max(lens), seq_k=max(lens), lens_q=lens, lens_k=lens)
    rule = default_block_rule(variant_name, probe, arch="sm90")
    blocks = variant.Blocks.from_dict(overrides, variant.Blocks(**(rule["blocks"] if rule else {})))
    reason = variant.problem_reason(probe) or variant.arch_reason(90, blocks)
    if reason or (packed and not variant.supports_varlen):
        return None
    dtype = DTYPES[dtype_name]
    seq = 512
    shape_q, shape_k = ((seq, heads, head_dim), (seq, kv_heads, head_dim)) if packed else \
        ((1, seq, heads, head_dim), (1, seq, kv_heads, head_dim))
    gen = torch.Generator().manual_seed(0)
    q, do, o = (torch.randn(*shape_q, dtype=dtype, generator=gen) for _ in range(3))
    k, v = (torch.randn(*shape_k, dtype=dtype, generator=gen) for _ in range(2))
    lse = torch.zeros(1, heads, seq, dtype=torch.float32)
    varlen = Packing(torch.tensor([0, 1, 130, 130, seq], dtype=torch.int32)) if packed else None
    gate = torch.zeros(*shape_q[:-1], dtype=torch.float32) if probe.gate else None
    launches, original = [], JITFunction.run

    def record(self, *args, grid, warmup, **kwargs):
        launches.append((self, args, kwargs))

    JITFunction.run = record
    try:
        scale = default_scale(head_dim)
        variant.forward(q, k, v, causal, scale, varlen=varlen, mods=probe.mods, g=gate)
        variant.backward(q, k, v, o, lse, do, causal=causal, scale=scale, blocks=blocks, varlen=varlen,
                         mods=probe.mods, g=gate)
    finally:
        JITFunction.run = original
    return launches


GLUON_FORWARD = "gluon_forward"  # --variants: the Gluon forward's kernel, not a design's
# (case, block field): a boolean field flipped in one more case than d64_causal, where it changes the kernels
FLIPPED_ELSEWHERE = {("d96", "head_dim_split"),  # issue 43: D96's 64 + 32 head-dim chunks (refused at D64)
                     ("d192_causal", "chunk_tiles")}  # issue 43: D192's 128 + 64 chunk tiles (refused at D64)


def _case_blocks(variant_name, case_name) -> list[tuple[str, dict]]:
    """The (label, block overrides) a design compiles in a case: every boolean field flipped at d64_causal, the
    fields of FLIPPED_ELSEWHERE in their case, else the defaults."""
    from variants import get
    if variant_name == GLUON_FORWARD:
        return [("default", {})]
    flips = _flipped_blocks(get(variant_name))
    if case_name == "d64_causal":
        return flips
    return [flips[0]] + [(label, blocks) for label, blocks in flips[1:]
                         if (case_name, next(iter(blocks))) in FLIPPED_ELSEWHERE]


def _gluon_forward_launches(case):
    """[(JITFunction, args, kwargs)] of the Gluon forward at its default tile, or None where it does not cover the
    case (fp32, the gate). A window is the config's `window` (left; right the same unless causal), packed documents
    the lengths the designs' packed cases use."""
    _, head_dim, causal, dtype_name, heads, kv_heads, modifiers, packed = case
    from kernels.gluon.forward import GLUON_FORWARD_HEAD_DIMS
    if dtype_name == "fp32" or modifiers.get("gate") or head_dim not in GLUON_FORWARD_HEAD_DIMS:
        return None
    from runners.compile.forward import capture_forward_launch
    window = modifiers.get("window", -1)
    mods = (window, -1 if causal else window, modifiers.get("softcap", 0.0)) if modifiers else None
    documents = ((1, 129, 0, 382),) * 2 if packed else None
    return [capture_forward_launch(head_dim, causal, dtype_name, heads=heads, kv_heads=kv_heads, mods=mods,
                                   documents=documents)[1]]


def fingerprint(job) -> dict:
    """{key: sha1 of the normalized PTX, or 'error: ...'} of one (variant, case, flipped field)."""
    variant_name, case, label, overrides, ptx_dir = job
    from runners.compile.resources import compile_kernel, use_compiler_not_interpreter
    use_compiler_not_interpreter()
    prefix = f"{variant_name}/{case[0]}/{label}"
    try:
        launches = _launches(variant_name, case, overrides)
    except Exception as exc:  # noqa: BLE001 - a refused config is a fingerprint too
        return {prefix: f"error: {type(exc).__name__}: {' '.join(str(exc).split())[:160]}"}
    if launches is None:
        return {}
    out, seen = {}, {}
    for fn, args, kwargs in launches:
        index = seen[fn.__name__] = seen.get(fn.__name__, -1) + 1
        key = f"{prefix}/{fn.__name__}#{index}"
        try:
            ptx = normalized(compile_kernel(fn, args, kwargs).asm["ptx"])
        except Exception as exc:  # noqa: BLE001
            out[key] = f"error: {type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
            continue
        out[key] = hashlib.sha1(ptx.encode()).hexdigest()[:16] + f" {ptx.count(chr(10))} lines"
        if ptx_dir:
            with open(os.path.join(ptx_dir, key.replace("/", "__") + ".ptx"), "w") as f:
                f.write(ptx)
    return out


def compare(before_path, after_path) -> int:
    before, after = (json.load(open(p)) for p in (before_path, after_path))
    differ = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    for key in differ:
        print(f"{key}: {before.get(key, 'missing')} -> {after.get(key, 'missing')}")
    print(f"{len(before)} before, {len(after)} after, {len(differ)} differ")
    return 1 if differ else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out")
    parser.add_argument("--ptx-dir")
    parser.add_argument("--variants", help="comma-separated; default: every Triton design in the registry")
    parser.add_argument("--cases", help="comma-separated case names (default: all)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    os.environ["TRITON_INTERPRET"] = "0"
    from variants import get, names
    from variants.base import TritonVariant
    wanted = args.variants.split(",") if args.variants else [n for n in names() if isinstance(get(n), TritonVariant)]
    cases = [c for c in CASES if not args.cases or c[0] in args.cases.split(",")]
    if args.ptx_dir:
        os.makedirs(args.ptx_dir, exist_ok=True)
    jobs = [(name, case, label, overrides, args.ptx_dir) for name in wanted for case in cases
            for label, overrides in _case_blocks(name, case[0])]
    result = {}
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for done, part in enumerate(pool.map(fingerprint, jobs), 1):
            result.update(part)
            print(f"\r{done}/{len(jobs)} configs, {len(result)} kernels", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    text = json.dumps(dict(sorted(result.items())), indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
