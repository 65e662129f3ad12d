"""The tables' vocabulary: column names, and the designs and block fields read from the variant registry.

Designs and block fields come from the registry and the Blocks dataclasses, read on first use: importing
runners.tables loads no variant (tests/test_layers.py). They read as tuples and follow new registrations."""
from __future__ import annotations

from collections.abc import Sequence


FLOP_CONVENTION = "FA convention: bwd = 2.5×fwd, causal halved"
REFERENCE = "reference"  # the fp32 reference: listed last among the baselines
# The block columns' order before they were derived: these stay first (and stay known for old tables) so that
# column order and rendered blocks do not move. Not a list to extend: a new field is found in its dataclass.
_COLUMN_ORDER = ("BLOCK_M", "BLOCK_N", "BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2", "BLK_SLICE_FACTOR",
                 "num_warps", "num_stages", "num_warps1", "num_stages1", "num_warps2", "num_stages2",
                 "prescale", "longest_first", "deterministic", "split_dkdv", "split_d")
_VARIANTS_MODULE = None


def variants_module():
    """The ``variants`` package, imported on first use with the interpreter switch set first as the runner does."""
    global _VARIANTS_MODULE
    if _VARIANTS_MODULE is None:
        from runners.point import env
        env.use_interpreter_without_gpu()
        import variants
        _VARIANTS_MODULE = variants
    return _VARIANTS_MODULE


def registered_variants() -> list:
    """[(name, variant instance)] of every registered variant, in registration order."""
    v = variants_module()
    return [(name, v.get(name)) for name in v.registry.registered()]


def triton_variants() -> tuple:
    """Every registered flash-bwd design (a ``TritonVariant``), in registration order."""
    base = variants_module().TritonVariant
    return tuple(name for name, impl in registered_variants() if isinstance(impl, base))


def baseline_variants() -> tuple:
    """Every other registered variant (the baselines), in registration order, the reference last."""
    designs = set(triton_variants())
    others = [name for name, _ in registered_variants() if name not in designs]
    return tuple(sorted(others, key=lambda name: name == REFERENCE))


def _declared_fields() -> dict:
    """{block field: its declared default} over every registered variant's Blocks dataclass (first declaration
    wins), in registration and field order."""
    from dataclasses import MISSING, fields
    found = {}
    for _, impl in registered_variants():
        for f in fields(impl.Blocks):
            found.setdefault(f.name, f.default if f.default is not MISSING else None)
    return found


def block_fields() -> tuple:
    """The union of every registered variant's block fields: the columns known before (``_COLUMN_ORDER``) first,
    then new fields in registration and field order."""
    declared = _declared_fields()
    return _COLUMN_ORDER + tuple(name for name in declared if name not in _COLUMN_ORDER)


def switch_fields() -> tuple:
    """The boolean block fields (shown by name when true), in ``block_fields`` order."""
    declared = _declared_fields()
    return tuple(name for name in block_fields() if isinstance(declared.get(name), bool))


class _FromRegistry(Sequence):
    """A tuple computed from the registry on first use, and again after a variant registers (a plugin)."""

    def __init__(self, compute):
        self._compute, self._size, self._value = compute, -1, ()

    def _get(self) -> tuple:
        size = len(variants_module().registry.registered())
        if size != self._size:
            self._value, self._size = tuple(self._compute()), size
        return self._value

    def __getitem__(self, index):
        return self._get()[index]

    def __len__(self) -> int:
        return len(self._get())

    def __iter__(self):
        return iter(self._get())

    def __contains__(self, item) -> bool:
        return item in self._get()

    def __eq__(self, other) -> bool:
        return self._get() == (tuple(other) if isinstance(other, (Sequence, _FromRegistry)) else other)

    def __hash__(self) -> int:
        return hash(self._get())

    def __add__(self, other) -> tuple:
        return self._get() + tuple(other)

    def __radd__(self, other) -> tuple:
        return tuple(other) + self._get()

    def __repr__(self) -> str:
        return repr(self._get())


TRITON_VARIANTS = _FromRegistry(triton_variants)  # every registered TritonVariant
BASELINE_VARIANTS = _FromRegistry(baseline_variants)
VARIANT_ORDER = _FromRegistry(lambda: triton_variants() + baseline_variants())
VARIANT_LABELS = {
    "sdpa_flash": "sdpa_flash (FA2)",
    "sdpa_cudnn": "sdpa_cudnn (cuDNN)",
    "sdpa_efficient": "sdpa_efficient (mem-eff)",
    "flex": "flex (FlexAttention)",
    "fa4": "fa4 (FlashAttention-4)",
    "reference": "reference (PyTorch math)",
}
BLOCK_FIELDS = _FromRegistry(block_fields)  # every registered variant's block fields
SWITCH_FIELDS = _FromRegistry(switch_fields)  # booleans: shown by name when true
# `modifiers`: the score modifiers as text ('window=1024,0 softcap=30 gate'; '' = plain attention, and rows before
# issue 24): a shape of its own, so a windowed row never joins, plots or ranks with a plain one
SHAPE_COLUMNS = ("batch", "heads", "kv_heads", "seq", "seq_k", "head_dim", "causal", "layout", "modifiers")
ENV_COLUMNS = ("device", "gpu_name", "compute_capability", "sm_count", "driver", "cuda", "torch", "triton",
               "python", "hostname", "commit", "dirty", "timestamp", "sweep_id", "peak_tflops")
MEASURE_COLUMNS = ("ms", "ms_p20", "ms_p80", "tflops", "tflops_p20", "tflops_p80", "executed_tflops", "pct_peak",
                   "peak_mem_bytes", "workspace_bytes", "max_abs_dq", "max_abs_dk", "max_abs_dv", "rel_dq",
                   "rel_dk", "rel_dv", "max_abs_dg", "rel_dg", "max_abs_dsink", "rel_dsink",
                   "max_abs_o", "rel_o", "max_abs_lse", "rel_lse")  # O and LSE: rows timing the forward (issue 42)
TIMED_COLUMN = "timed"  # what a kernel row times: backward (also rows before issue 42), forward, train
EXPLAIN_COLUMNS = ("kernel_ms_sum", "kernel_launches", "top_kernel_share", "n_regs", "n_spills", "smem_bytes",
                   "compiled_num_warps", "compiled_num_stages", "programs_per_sm",  # numeric; runners/point/profile.py
                   "top_kernel_tensor_pct", "top_kernel_dram_pct")  # runners/point/ncu.py (bench.ncu=true)
EXPLAIN_TEXT_COLUMNS = ("kernel_ms", "top_kernel", "resources_json", "top_triton_kernel", "occupancy_limiter",
                        "profile_note",  # JSON / names; '' when absent (rows before issue 10, CPU interpreter)
                        "ncu_tensor_pct", "ncu_dram_pct", "ncu_kernel_ms", "ncu_note")  # '' in rows before issue 25
STEP_KIND = "model_step"  # bench_kind of runners.model_step rows (a training step); any other: a kernel row
HOST_KIND = "host_cost"  # bench_kind of runners.host_cost rows (host time of one eager forward + backward call)
# Whole-call rows: timed in ms per call (no TFLOPS), keyed by their JSON config_key (runners.tables.step_join_key)
CALL_KINDS = (STEP_KIND, HOST_KIND)
STEP_MEASURE_COLUMNS = ("attn_bwd_ms", "attn_bwd_share", "loss_max_dev", "loss_spread", "loss_tol")
STEP_KIND_COLUMN = "bench_kind"
STEP_TIMING_KEYS = ("warmup", "rep")  # how long a step is timed, not what: out of its join key (as bench.rep is)
GPU = "gpu_label"  # derived column: gpu_name, or the device ("cpu-interpreter") when there is no GPU name
PEAK = "dtype_peak_tflops"  # derived column: the GPU's dense peak for the row's dtype (NaN when unknown)


def step_config_columns() -> tuple:
    """A model-step row's config columns: `model` (the conf/model file) and every ModelConfig field, derived from
    the dataclass (runners.model.config), so a key added there is a column here without an edit."""
    from dataclasses import fields

    from runners.model.config import ModelConfig
    return ("model", *(f.name for f in fields(ModelConfig) if f.name != "name"))


def base_variant(name: str) -> str:
    return name[: -len("+deterministic")] if name.endswith("+deterministic") else name


def is_triton(variant: str) -> bool:
    """A flash-bwd design (either mode), not a baseline."""
    return base_variant(variant) in TRITON_VARIANTS


def variant_order(variants) -> list[str]:
    variants = list(dict.fromkeys(variants))
    known = [v for v in VARIANT_ORDER if v in variants]
    return known + sorted(v for v in variants if v not in VARIANT_ORDER)


def variant_label(variant: str) -> str:
    return VARIANT_LABELS.get(variant, variant)
