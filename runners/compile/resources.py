"""Compiled resources of a variant's Triton kernels for NVIDIA GPU architectures, on a machine without a GPU.

    python -m runners.compile_check --variant two_pass --head-dim 256 --causal --dtype bf16 \\
        [--arch sm80,sm90,sm100,sm120] [--blocks BLOCK_M1=64,BLOCK_N1=64,num_warps1=8 ...] \\
        [--kernels _dkdv_kernel] [--out table.csv]

Per architecture (default sm90; runners/compile/arch_limits.py: sm80 sm86 sm89 sm90 sm100 sm120) and Triton kernel the
variant's backward launches: registers per thread, spill stores / loads (bytes, from `ptxas -v`), shared memory
(the compiled kernel's metadata.shared) and resident programs per SM with what limits them
(runners.point.profile.programs_per_sm with that architecture's limits), or why it cannot run (`OutOfResources: shared
memory ...`, a compile error, `unsupported: ...` where the design needs a feature the architecture has not,
Variant.arch_reason, or does not cover the problem, Variant.problem_reason: ws at head dim 256). Blocks default
to that architecture's rule in conf/block_defaults.yaml (`blocks_source`: measured, compile_checked, or
dataclass). Several `--blocks` give one row per (config, arch, kernel).
Numbers come from this machine's Triton and its bundled ptxas, not from a GPU: no timings (docs/compile_check.md).

How: the backward runs once on a tiny CPU problem (sequence 4 x the largest block, so EVEN_M/EVEN_N match a
realistic run) with the Triton interpreter OFF and `JITFunction.run` replaced by a recorder, so nothing executes;
each recorded launch is then bound and specialized by Triton's own binder for an sm90 backend and compiled
with `triton.compile(ASTSource(...), target=GPUTarget("cuda", capability, 32))` (capability 80 ... 120).
"""
import functools
import json
import os
import re
import subprocess
import sys
import tempfile

from runners.compile.arch_limits import ARCHS, DEFAULT_ARCH, ArchLimits

MAX_SMEM_PER_BLOCK = ARCHS["sm90"].smem_per_block  # H100: the opt-in maximum of dynamic shared memory per block
COLUMNS = ["arch", "variant", "head_dim", "dtype", "causal", "heads", "kv_heads", "modifiers", "blocks", "blocks_source",
           "kernel", "num_warps", "num_stages", "n_regs", "spill_store_bytes", "spill_load_bytes", "ptxas_advice",
           "smem_bytes",
           "programs_per_sm", "limiter", "status"]


class CompileCheckError(ValueError):
    """A bad request (unknown variant, bad blocks): one line, exit 2."""


def parse_blocks(text: str) -> dict:
    """'BLOCK_M1=64,num_warps1=8,prescale=true' or a JSON object -> {field: value}."""
    text = text.strip()
    if text.startswith("{"):
        return json.loads(text)
    out = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        if "=" not in item:
            raise CompileCheckError(f"--blocks: {item!r} is not FIELD=VALUE")
        key, value = (s.strip() for s in item.split("=", 1))
        low = value.lower()
        out[key] = True if low == "true" else False if low == "false" else int(value)
    return out


def use_compiler_not_interpreter() -> None:
    """@triton.jit must build JITFunctions (not the interpreter's), so this decides before any kernel import."""
    if os.environ.get("TRITON_INTERPRET", "0") == "1" and "kernels" in sys.modules:
        raise RuntimeError("kernels were imported with TRITON_INTERPRET=1; run compile_check in a fresh process")
    os.environ["TRITON_INTERPRET"] = "0"
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default (fusion on), without its warning
    from triton import knobs
    knobs.runtime.interpret = False


def probe_problem(head_dim, dtype_name, causal, heads, kv_heads, modifiers: dict | None = None):
    """The Problem the default blocks and the design's own problem rule are asked about (a CPU one: no GPU here).
    modifiers: score modifiers as the sweep names them, {window: left keys, softcap, gate} (issue 24); a window is
    (left, 0) when causal, (left, left) when not, as the sweep makes it; head_dim_v: V's head dim (issue 47; None or
    absent: head_dim)."""
    from variants.problem import DTYPES, Problem
    head_dim_v = (modifiers or {}).get("head_dim_v")
    problem = Problem(1, 256, 256, heads, kv_heads, head_dim, causal, DTYPES[dtype_name], "cpu",
                      head_dim_v=None if head_dim_v in (None, head_dim) else head_dim_v)
    window = (modifiers or {}).get("window")
    return problem.with_modifiers(None if window is None else (window, window), (modifiers or {}).get("softcap", 0.0),
                                  (modifiers or {}).get("gate", False))


def unsupported_reason(variant, problem, arch: ArchLimits, blocks) -> str | None:
    """Why the design cannot run this config on a GPU of `arch`, in its own words, or None: the architecture it
    needs (Variant.arch_reason), else the problem its kernels do not cover (Variant.problem_reason: e.g. ws's head
    dims). runners.compile_check compiles nothing where this answers."""
    return variant.arch_reason(arch.capability, blocks) or variant.problem_reason(problem)


def capture_launches(variant_name, head_dim, dtype_name, causal, heads, kv_heads, blocks_overrides,
                     arch: ArchLimits = ARCHS[DEFAULT_ARCH], modifiers: dict | None = None):
    """(Blocks, blocks_source, [(JITFunction, args, kwargs)]) of one backward of the variant with `arch`'s default
    blocks (conf/block_defaults.yaml, that compute capability's table, else `any`) under the overrides, nothing
    executed. blocks_source: the default rule's `source` (variants.block_defaults.rule_source), `override` when
    overrides were given. modifiers: score modifiers as `probe_problem` takes them (the default blocks are the
    modified problem's: block rules may ask `windowed` / `softcap`)."""
    use_compiler_not_interpreter()
    import torch
    from triton.runtime.jit import JITFunction

    from variants import get
    from variants.base import TritonVariant, default_scale
    from variants.block_defaults import default_block_rule, load_table, rule_source
    from variants.problem import DTYPES

    try:
        variant = get(variant_name)
    except ValueError as exc:
        raise CompileCheckError(str(exc)) from None
    if not isinstance(variant, TritonVariant):
        raise CompileCheckError(f"variant {variant_name!r} has no Triton kernels (a baseline)")
    dtype = DTYPES[dtype_name]
    sizes = [v for k, v in blocks_overrides.items() if k.startswith("BLOCK_") and isinstance(v, int)]
    probe = probe_problem(head_dim, dtype_name, causal, heads, kv_heads, modifiers)
    try:
        rule = default_block_rule(variant_name, probe, arch=arch.table_key)
        defaults = variant.Blocks(**(rule["blocks"] if rule else {}))
        if hasattr(variant, "yielding_overrides"):  # ws: a rule's fields that yield to the overrides, as in a run
            blocks_overrides = variant.yielding_overrides(blocks_overrides, defaults)
        blocks = variant.Blocks.from_dict(blocks_overrides, defaults)
    except (ValueError, TypeError) as exc:
        raise CompileCheckError(f"blocks: {exc}") from None
    source = "override" if blocks_overrides else rule_source(rule)
    if not blocks_overrides and arch.table_key not in load_table():  # another architecture's rules (`any`)
        source += " (any)"
    sizes += [v for k, v in blocks.as_dict().items() if k.startswith("BLOCK_") and isinstance(v, int)]
    seq = 4 * max(sizes + [64])
    head_dim_v = probe.value_dim  # V's, O's and dO's (issue 47)
    q = torch.randn(1, seq, heads, head_dim, dtype=dtype)
    do, o = (torch.randn(1, seq, heads, head_dim_v, dtype=dtype) for _ in range(2))
    k = torch.randn(1, seq, kv_heads, head_dim, dtype=dtype)
    v = torch.randn(1, seq, kv_heads, head_dim_v, dtype=dtype)
    lse = torch.zeros(1, heads, seq, dtype=torch.float32)

    launches, original = [], JITFunction.run

    def record(self, *args, grid, warmup, **kwargs):
        launches.append((self, args, kwargs))
        return None

    JITFunction.run = record
    try:
        gate = torch.zeros(1, seq, heads, dtype=torch.float32) if probe.gate else None  # [B, N, H]
        variant.backward(q, k, v, o, lse, do, causal=causal, scale=default_scale(head_dim), blocks=blocks,
                         mods=probe.mods, g=gate)
    finally:
        JITFunction.run = original
    return blocks, source, launches


def compile_kernel(fn, args, kwargs, capability: int = ARCHS[DEFAULT_ARCH].capability,
                   scalar_types: dict | None = None):
    """The CompiledKernel of one recorded launch for that compute capability (Triton's binder: same signature,
    constexprs, divisibility attributes and options as a launch on such a GPU would have). scalar_types:
    {parameter: Triton type} replacing the binder's, e.g. {"qk_scale": "fp64"} or, for a field of a NamedTuple
    argument (kernels/backward_args.py), {"sizes.qk_scale": "fp64"}: the type a caller passing a SymFloat gives."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget("cuda", capability, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound_args, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound_args, specialization, options)
    for name, kind in (scalar_types or {}).items():
        param, _, field = name.partition(".")  # "sizes.qk_scale": a field of a NamedTuple argument
        if param in signature:
            signature[param] = signature[param]._replace(**{field: kind}) if field else kind
    source = ASTSource
    if getattr(fn, "is_gluon", lambda: False)():  # a @gluon.jit kernel: Gluon's own front end
        from triton.experimental.gluon._runtime import GluonASTSource as source
    src = source(fn, signature, constexprs, attrs)
    compiled = triton.compile(src, target=target, options=options.__dict__)
    check_launcher(src, compiled)
    return compiled


def check_launcher(src, compiled) -> None:
    """Expands the kernel's arguments the way this Triton's CUDA launcher does at the first launch (pure Python, no
    GPU needed), so a kernel that compiles but cannot be launched fails here too: Triton 3.6's launcher takes host
    tensor descriptors only as top-level arguments, not inside a tuple (an AssertionError at launch)."""
    import triton
    from triton.backends.nvidia import driver

    arg_index = lambda x: (src.fn.arg_names.index(x),) if isinstance(x, str) else x  # noqa: E731 - as the driver
    constants = {arg_index(key): value for key, value in getattr(src, "constants", {}).items()}
    signature = dict(src.signature)
    meta = getattr(compiled.metadata, "tensordesc_meta", None)
    try:
        if hasattr(driver, "expand_signature"):  # Triton 3.9
            driver.expand_signature(signature.values(), meta, "nvTmaDesc")
        elif hasattr(driver, "make_launcher"):  # Triton 3.6
            driver.make_launcher(constants, signature, meta)
    except Exception as exc:  # noqa: BLE001 - any failure here is a launch failure on a GPU
        raise RuntimeError(f"Triton {triton.__version__}'s CUDA launcher cannot take this kernel's arguments "
                           f"(host tensor descriptors inside a tuple?): {type(exc).__name__} {exc}") from None


@functools.lru_cache(maxsize=512)
def ptxas_usage(ptx: str, capability: int = ARCHS[DEFAULT_ARCH].capability) -> dict:
    """{'n_regs', 'spill_store_bytes', 'spill_load_bytes'} from the bundled ptxas -v on the kernel's PTX, with the
    ptxas and --gpu-name Triton itself uses for that capability (ptxas-blackwell from sm90 on; sm_90a, sm_100a,
    sm_120a) and Triton's flags (-lineinfo --regAllocOptLevel=2). Cached per PTX: the delta kernel of every design.
    Also 'ptxas_advice': ptxas's numbered advisories, e.g. (C7515) wgmma serialized; FLASH_BWD_PTXAS_LOG=1 prints
    the whole log."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        result = subprocess.run([get_ptxas(capability).path, "-lineinfo", "-v", "--regAllocOptLevel=2",
                                 f"--gpu-name={sm_arch_from_capability(capability)}", src, "-o", src + ".o"],
                                capture_output=True, text=True)
    log = result.stdout + result.stderr
    if os.environ.get("FLASH_BWD_PTXAS_LOG"):
        print(log, file=sys.stderr)
    if result.returncode:
        raise RuntimeError(f"ptxas failed: {' '.join(log.split())[:200]}")
    return parse_ptxas_log(log)


def parse_ptxas_log(log: str) -> dict:
    regs = re.search(r"Used (\d+) registers", log)
    stores = re.search(r"(\d+) bytes spill stores", log)
    loads = re.search(r"(\d+) bytes spill loads", log)
    advice = sorted({re.sub(r"\s+", " ", m.group(1)).strip()[:160]  # e.g. (C7515) wgmma serialized: why
                     for m in re.finditer(r"ptxas[\w-]* (?:warning|info)\s*:\s*(\(C\d+\).*)", log)})
    return {"n_regs": int(regs.group(1)) if regs else None,
            "spill_store_bytes": int(stores.group(1)) if stores else 0,
            "spill_load_bytes": int(loads.group(1)) if loads else 0,
            "ptxas_advice": "; ".join(advice)}


def kernel_row(fn, args, kwargs, arch: ArchLimits = ARCHS[DEFAULT_ARCH]) -> dict:
    """One kernel's resources on a GPU of `arch`, or its failure in `status` (never raises)."""
    from runners.point.profile import exception_line, programs_per_sm

    warps, stages = int(kwargs.get("num_warps", 4)), int(kwargs.get("num_stages", 3))
    row = {"kernel": fn.__name__, "num_warps": warps, "num_stages": stages}
    try:
        compiled = compile_kernel(fn, args, kwargs, arch.capability)
        usage = ptxas_usage(compiled.asm["ptx"], arch.capability)
    except Exception as exc:  # noqa: BLE001 - a config that does not compile is a row, not a crash
        return {**row, "status": f"compile error: {exception_line(exc)}"}
    shared = int(compiled.metadata.shared)
    warps, stages = int(compiled.metadata.num_warps), int(compiled.metadata.num_stages)
    row.update(num_warps=warps, num_stages=stages, smem_bytes=shared, **usage)
    threads = warps * 32
    if shared > arch.smem_per_block:
        return {**row, "status": f"OutOfResources: shared memory, Required: {shared}, Hardware limit: {arch.smem_per_block}"}
    if threads > arch.max_threads_per_block:
        return {**row, "status": f"OutOfResources: threads, Required: {threads}, "
                                 f"Hardware limit: {arch.max_threads_per_block}"}
    programs, limiter = programs_per_sm(usage["n_regs"], shared, warps, arch.occupancy_limits())
    if programs == 0:
        return {**row, "programs_per_sm": 0, "limiter": limiter,
                "status": f"OutOfResources: {limiter} (no program fits on an SM)"}
    return {**row, "programs_per_sm": programs, "limiter": limiter, "status": "ok"}


def check(variant, head_dim, dtype, causal, heads, kv_heads, blocks_overrides, kernels=None,
          arch: ArchLimits = ARCHS[DEFAULT_ARCH], modifiers: dict | None = None) -> list[dict]:
    """Rows (COLUMNS) of every distinct kernel launch of one backward config on `arch`; where the design cannot
    run there (unsupported_reason: the architecture, or a problem its kernels do not cover), every kernel's row says
    `unsupported: <why>` and nothing is compiled."""
    blocks, source, launches = capture_launches(variant, head_dim, dtype, causal, heads, kv_heads, blocks_overrides,
                                                arch, modifiers)  # first: it decides compiler vs interpreter
    from variants import get

    probe = probe_problem(head_dim, dtype, causal, heads, kv_heads, modifiers)
    reason = unsupported_reason(get(variant), probe, arch, blocks)
    base = {"arch": arch.name, "variant": variant, "head_dim": head_dim, "dtype": dtype, "causal": causal,
            "heads": heads, "kv_heads": kv_heads, "modifiers": probe.modifier_text,
            "blocks": json.dumps(blocks.as_dict(), separators=(",", ":")),
            "blocks_source": source}
    rows, seen = [], set()
    for fn, args, kwargs in launches:
        if kernels and fn.__name__ not in kernels:
            continue
        key = (fn.__name__, repr(sorted((k, v) for k, v in kwargs.items() if not hasattr(v, "data_ptr"))))
        if key in seen:
            continue
        seen.add(key)
        if reason:
            row = {"kernel": fn.__name__, "num_warps": kwargs.get("num_warps", 4),
                   "num_stages": kwargs.get("num_stages", 3), "status": f"unsupported: {reason}"}
        else:
            row = kernel_row(fn, args, kwargs, arch)
        rows.append({**base, **row})
    return [{c: row.get(c) for c in COLUMNS} for row in rows]


def format_row(row: dict) -> str:
    head = f"{row['kernel']:<20} w{row['num_warps']} s{row['num_stages']}"
    if row["n_regs"] is None:
        return f"{head}  {row['status']}"
    text = (f"{head}  regs {row['n_regs']:>3}  spills {row['spill_store_bytes']} B stored / "
            f"{row['spill_load_bytes']} B loaded  smem {row['smem_bytes'] / 1024:.1f} KB")
    advice = f"\n    ptxas: {row['ptxas_advice']}" if row.get("ptxas_advice") else ""
    if row["status"] == "ok":
        return f"{text}  programs/SM {row['programs_per_sm']} ({row['limiter']}){advice}"
    return f"{text}  {row['status']}{advice}"
