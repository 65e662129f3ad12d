"""Config schemas (Hydra structured configs) and the semantic check that runs before anything is measured.

The dataclasses give every key its type, so a typo'd key or a wrong type fails at composition with Hydra's
message. `check(cfg)` then checks what types cannot (seq >= 1, heads % kv_heads == 0, a valid block combo
for the variant) and turns the config into a `Point`; a failure is a `ConfigError` that names the field.
"""
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from spec import DTYPE_NAMES, LAYOUTS, MAX_HEAD_DIM, TIMED  # noqa: F401 - re-exported (schema.DTYPE_NAMES, ...)

ISOLATE_CHOICES = ("auto", True, False)


@dataclass
class VariantConf:
    name: str = MISSING  # a name from variants.names()


@dataclass
class GpuConf:
    name: str = MISSING  # "auto": detected, numbers taken from the gpu/*.yaml whose `match` fits
    index: Any = 0  # CUDA device index, or "auto": the first GPU whose lease is free (runners/isolation/lease.py)
    match: List[str] = field(default_factory=list)  # substrings of torch.cuda.get_device_name() this file describes
    peak_tflops_bf16: Optional[float] = None  # dense tensor-core peak (vendor datasheet)
    peak_tflops_fp16: Optional[float] = None
    peak_tflops_fp32: Optional[float] = None  # non-tensor-core FP32 (the kernels' fp32 dots are IEEE)
    mem_bandwidth_tbs: Optional[float] = None  # HBM bandwidth, TB/s


@dataclass
class BenchConf:
    warmup: float = MISSING  # ms of warm-up (triton.testing.do_bench)
    rep: float = MISSING  # ms of timed repetitions
    flush_l2: bool = MISSING  # zero an L2-sized buffer before every rep (do_bench does this itself)
    cuda_graph: bool = MISSING  # time with do_bench_cudagraph (one graph of unrolled calls; no L2 flush)
    cpu_warmup: int = MISSING  # CPU interpreter: untimed calls before timing
    cpu_rep: int = MISSING  # CPU interpreter: wall-clock-timed calls
    ncu: bool = False  # after timing and profile: Nsight Compute's tensor-pipe / DRAM % per kernel (runners/point/ncu.py)
    ncu_timeout_s: float = 120.0  # the ncu run of one point; past it the ncu columns stay empty (the row stands)


@dataclass
class VarlenConf:
    dist: str = "none"  # none (uniform [B, N] batch), fixed, uniform, lognormal: packed documents (cu_seqlens)
    mean_len: Optional[int] = None  # mean document length; null = seq
    sigma: float = 1.0  # lognormal: std of log(length)
    max_len: Optional[int] = None  # cap on a document's length; null = tokens
    seed: int = 0  # document lengths are drawn under this seed


@dataclass
class SweepConfig:
    variant: VariantConf = field(default_factory=VariantConf)
    varlen: VarlenConf = field(default_factory=VarlenConf)  # varlen/<dist>.yaml: packed variable-length batches
    blocks: Dict[str, Any] = field(default_factory=dict)  # null field = the variant's default for the problem
    gpu: GpuConf = field(default_factory=GpuConf)
    bench: BenchConf = field(default_factory=BenchConf)
    seq: int = MISSING  # query length Nq
    seq_k: Optional[int] = None  # key length Nk; null = seq
    head_dim: int = MISSING
    batch: int = MISSING
    heads: int = MISSING
    kv_heads: Optional[int] = None  # null = heads (no GQA)
    causal: bool = MISSING
    dtype: str = MISSING  # bf16, fp16, fp32
    layout: str = MISSING  # bnhd ([B, N, H, D] tensors) or bhnd ([B, H, N, D] tensors, passed as views)
    seed: int = 0
    tokens: Optional[int] = None  # if set, batch = max(1, tokens // seq) (FlashAttention papers: 16384)
    hidden: Optional[int] = None  # if set, heads = hidden // head_dim (FlashAttention papers: 2048)
    window: Optional[int] = None  # sliding window: keys visible to the left of the diagonal; null = no window
    window_right: Optional[int] = None  # non-causal windows: keys to the right; null = window (symmetric)
    softcap: float = 0.0  # logit softcapping (Gemma 2): 0 = off
    gate: bool = False  # FLA's log forget gate g [B, N, H] (causal, Nq == Nk)
    forward: Optional[str] = None  # the forward the backward reads (kernels.forward_choice.FORWARDS); null = the design's default (auto)
    timed: str = "backward"  # what a row times (runners/point/timed.py): backward | forward | train (fwd + bwd)
    head_dim_v: Optional[int] = None  # issue 47: V's head dim (MLA: head_dim=192 head_dim_v=128); null = head_dim
    sink: bool = False  # issue 47: a learnable per-head sink (GPT-OSS), random fp32 logits [H], and its gradient
    results_dir: str = MISSING
    resume: bool = MISSING  # skip points already recorded for the same config_key, GPU and commit
    cpu_budget_s: float = 60.0  # CPU interpreter: points estimated longer are `skipped` rows (runners/point/cpu_cost.py)
    sweep_id: str = MISSING
    isolate: Any = "auto"  # each point in a worker process (runners/isolation/isolate.py): auto (GPU yes, CPU no), true, false
    point_timeout_s: float = 300.0  # isolated point with no result after this many seconds: killed, status timeout
    plugins: List[str] = field(default_factory=list)  # modules imported before checking and measuring (own variants)
    study: Optional[str] = None  # set by runners.tune: the Optuna study a row belongs to (its `study` column)


@dataclass
class TuneConfig(SweepConfig):
    """runners.tune (conf/tune.yaml): the sweep's keys plus the study's (docs/tuning.md)."""
    trials: int = 20  # distinct configs to measure in the study (restored trials count)
    space: str = "declared"  # declared (Blocks field metadata) | grid (conf/sweep_grid/blocks_<variant>.yaml) | search
    search: Dict[str, List[Any]] = field(default_factory=dict)  # field -> candidates; replaces the declared ones
    sampler_seed: int = 0  # TPESampler seed
    startup_trials: Optional[int] = None  # TPE's random start; null = min(10, max(3, trials // 3))
    warm_start: bool = True  # trial 0 is the current default blocks of the shape (when inside the space)
    decompose: Any = "auto"  # one TPE study per kernel of the searched fields: auto (>= 2 kernels), true, false
    write_defaults: bool = False  # after the study: study winners -> defaults_file rules, diff printed
    defaults_rows: Optional[str] = None  # rows write_defaults reads; null = <results_dir>/<this gpu>
    defaults_file: Optional[str] = None  # null = conf/block_defaults.yaml


def register() -> None:
    """Puts the schemas in Hydra's ConfigStore (idempotent); config.yaml lists `sweep_schema` first."""
    ConfigStore.instance().store(name="sweep_schema", node=SweepConfig)
    ConfigStore.instance().store(name="tune_schema", node=TuneConfig)


register()


# ---- the variant group's configs, derived from the registry -------------------------------------------------

def variant_node(name: str) -> dict:
    """What conf/variant/<name>.yaml holds, derived from the design's Blocks dataclass: its name and every block
    field, null (= the design's default for the problem)."""
    from dataclasses import fields

    import variants
    return {"variant": {"name": name}, "blocks": {f.name: None for f in fields(variants.get(name).Blocks)}}


def derived_grid(name: str) -> dict:
    """{field: candidates} of the `sweep=blocks` grid of a design without conf/sweep_grid/blocks_<name>.yaml: the
    fields its Blocks dataclass declares `tunable` (variants/blocks.py), every combination ({} for a baseline)."""
    import variants
    return dict(variants.get(name).Blocks.search_space())


def _override_value(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def store_variant_configs() -> list[str]:
    """Makes `variant=<name>` work for every registered design: a design without conf/variant/<name>.yaml gets its
    `variant_node` in Hydra's ConfigStore (group `variant`), and, when it declares tunable fields and has no
    conf/sweep_grid/blocks_<name>.yaml, its `derived_grid` as `sweep_grid/blocks_<name>`. A yaml file, where there
    is one, wins (Hydra reads the conf folder first). Idempotent; run again after a plugin registers designs.
    The names stored."""
    import variants
    from runners.point import env

    store, stored = ConfigStore.instance(), []
    for name in variants.registry.registered():
        if not (env.CONF_DIR / "variant" / f"{name}.yaml").is_file():
            store.store(group="variant", name=name, node=variant_node(name), package="_global_", provider="flash_bwd")
            stored.append(name)
        grid = derived_grid(name)
        if grid and not (env.CONF_DIR / "sweep_grid" / f"blocks_{name}.yaml").is_file():
            params = {f"blocks.{k}": ",".join(map(_override_value, v)) for k, v in grid.items()}
            store.store(group="sweep_grid", name=f"blocks_{name}", node={"hydra": {"sweeper": {"params": params}}},
                        package="_global_", provider="flash_bwd")
    return stored


class ConfigError(ValueError):
    """A config that types allow but the semantics do not; str() is one line naming the field."""

    def __init__(self, field_name: str, message: str, text: str | None = None):
        super().__init__(text or f"{field_name}: {message}")
        self.field = field_name

    def with_suffix(self, suffix: str) -> "ConfigError":
        return ConfigError(self.field, "", f"{self}{suffix}")


class BlockRuleError(ConfigError):
    """Block fields that break a rule of the variant (`Blocks.check_rules`: e.g. BLOCK_N=64 with 8 warps). Alone,
    a config error; as one point of a multirun grid, an `unsupported` row with the rule (runners.sweep).
    `point`: the point with the blocks as asked (RequestedBlocks), for that row."""

    def __init__(self, field_name: str, message: str, text: str, point: "Point"):
        super().__init__(field_name, message, text)
        self.point = point


@dataclass(frozen=True)
class RequestedBlocks:
    """The block fields a config asked for, unresolved: the blocks of a point refused by a block rule."""
    fields: tuple  # ((name, value), ...)

    def as_dict(self) -> dict:
        return dict(self.fields)


@dataclass(frozen=True)
class Point:
    """One measurement's problem and resolved blocks, from a checked config."""
    variant: str
    batch: int
    seq: int
    seq_k: int
    heads: int
    kv_heads: int
    head_dim: int
    causal: bool
    dtype: str
    layout: str
    blocks: Any  # the variant's Blocks dataclass, resolved (defaults for the problem + overrides)
    block_overrides: dict  # the non-null `blocks` fields given in the config
    doc_lens: tuple | None = None  # a packed varlen batch: document lengths (batch = documents, seq = longest)
    varlen_dist: str = "none"
    varlen_spec: str = ""  # the distribution's parameters, part of config_key
    # score modifiers (issue 24), as variants.problem.Problem holds them: -1 = unbounded; all off by default
    window_left: int = -1
    window_right: int = -1
    softcap: float = 0.0
    gate: bool = False
    forward: str = "stock"  # the forward asked for (kernels.forward_choice.FORWARDS); stock: the shared Triton one
    timed: str = "backward"  # what is timed (runners.point.timed.TIMED): backward, forward, or train (both in one call)
    # issue 47: V's head dim when it differs from head_dim (None: the same), and a learnable per-head sink
    head_dim_v: int | None = None
    sink: bool = False

    @property
    def value_dim(self) -> int:
        """V's (and dO's, O's, dV's) head dim."""
        return self.head_dim if self.head_dim_v is None else self.head_dim_v

    @property
    def blocks_dict(self) -> dict:
        return self.blocks.as_dict()

    @property
    def blocks_json(self) -> str:
        return json.dumps(self.blocks_dict, sort_keys=True)

    def problem(self, device: str):
        from variants.problem import DTYPES, Problem
        if self.doc_lens is not None:
            problem = Problem.packed(self.doc_lens, self.doc_lens, self.heads, self.kv_heads, self.head_dim,
                                     self.causal, DTYPES[self.dtype], device)
        else:
            problem = Problem(self.batch, self.seq, self.seq_k, self.heads, self.kv_heads, self.head_dim,
                              self.causal, DTYPES[self.dtype], device)
        if not self.modified:
            return problem
        problem = dataclasses.replace(problem, head_dim_v=self.head_dim_v, sink=self.sink)
        return problem.with_modifiers((self.window_left, self.window_right), self.softcap, self.gate)

    def config_key(self, timer: str) -> str:
        """Stable string identifying what is measured: shape, dtype, layout, resolved blocks, timer."""
        blocks = ",".join(f"{k}={v}" for k, v in sorted(self.blocks_dict.items()))
        return (f"{self.variant}|b={self.batch}|h={self.heads}|hkv={self.kv_heads}|nq={self.seq}|nk={self.seq_k}"
                f"|d={self.head_dim}|causal={int(self.causal)}|{self.dtype}|{self.layout}|blocks[{blocks}]|{timer}"
                + (f"|varlen[{self.varlen_spec}]" if self.doc_lens is not None else "")
                + (f"|mods[{self.problem('cpu').modifier_text}]" if self.modified else "")
                + self.timed_key())

    def timed_key(self) -> str:
        """'' for a backward row (its key as before issue 42, whichever forward it read: the backward's timing does
        not include the forward; the row records `forward` / `forward_ran`), else '|fwd=<forward>' where the forward
        is not stock (the forward is what such a row times), then '|timed=<kind>' (the order of the rows measured
        since issue 42; runners.tables.keys.timed_suffix: the same rule, in its own order)."""
        if self.timed == "backward":
            return ""
        return (f"|fwd={self.forward}" if self.forward != "stock" else "") + f"|timed={self.timed}"

    @property
    def modified(self) -> bool:
        """Any score modifier on (window, softcap, gate), or issue 47's value head dim or sink (in the same text)."""
        return (self.window_left >= 0 or self.window_right >= 0 or self.softcap > 0 or self.gate
                or self.head_dim_v is not None or self.sink)

    def label(self) -> str:
        """Short human description for progress lines."""
        seq = f"{self.seq}" if self.seq == self.seq_k else f"{self.seq}x{self.seq_k}"
        if self.doc_lens is not None:
            seq = f"{sum(self.doc_lens)} packed ({self.varlen_dist}, {len(self.doc_lens)} docs, mean {sum(self.doc_lens) / len(self.doc_lens):.0f})"
        heads = f"{self.heads}" if self.heads == self.kv_heads else f"{self.heads}/{self.kv_heads}"
        mask = "causal" if self.causal else "full"
        text = f"{self.variant} b={self.batch} h={heads} seq={seq} d={self.head_dim} {mask} {self.dtype}"
        if self.layout != "bnhd":
            text += f" {self.layout}"
        if self.modified:
            text += f" {self.problem('cpu').modifier_text}"
        from kernels.forward_choice import DEFAULT_FORWARD
        if self.forward not in ("stock", DEFAULT_FORWARD):  # the default (and a baseline's own) goes unsaid
            text += f" forward={self.forward}"
        if self.timed != "backward":
            text += f" timed={self.timed}"
        if self.block_overrides:
            text += " [" + " ".join(f"{k}={v}" for k, v in self.block_overrides.items()) + "]"
        return text


def _int_at_least(cfg, name: str, low: int, value=None) -> int:
    value = cfg[name] if value is None else value
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(name, f"must be an integer >= {low}, got {value!r}")
    return value


def _forward_arg(cfg: DictConfig, variant) -> str:
    """The config's `forward` (issue 42; kernels/forward_choice.py), checked; null or absent: the design's
    `default_forward` (stock for a baseline, which runs its own forward)."""
    from kernels.forward_choice import check_forward
    choice = cfg.get("forward") or getattr(variant, "default_forward", "stock")
    try:
        return check_forward(choice)  # FORWARDS or gluon.<variant>
    except ValueError as exc:
        raise ConfigError("forward", "", str(exc)) from None


def _timed_arg(cfg: DictConfig) -> str:
    """The config's `timed` (runners/point/timed.py), checked; absent: backward."""
    choice = cfg.get("timed") or "backward"
    if choice not in TIMED:
        raise ConfigError("timed", f"must be one of {', '.join(TIMED)}, got {choice!r}")
    return choice


def check(cfg: DictConfig, device: str) -> Point:
    """The semantic check: a Point, or a ConfigError naming the first bad field. Imports `variants`
    (so TRITON_INTERPRET must already be decided, see runners.point.env.use_interpreter_without_gpu)."""
    import variants

    import_plugins(cfg.get("plugins") or [])
    seq = _int_at_least(cfg, "seq", 1)
    seq_k = seq if cfg.seq_k is None else _int_at_least(cfg, "seq_k", 1)
    head_dim = _int_at_least(cfg, "head_dim", 1)
    if head_dim > MAX_HEAD_DIM:
        raise ConfigError("head_dim", f"must be in 1..{MAX_HEAD_DIM}, got {head_dim}")
    if cfg.tokens is None:
        batch = _int_at_least(cfg, "batch", 1)
    else:
        batch = max(1, _int_at_least(cfg, "tokens", 1) // seq)
    if cfg.hidden is None:
        heads = _int_at_least(cfg, "heads", 1)
    else:
        heads = _int_at_least(cfg, "hidden", head_dim) // head_dim
        if heads * head_dim != cfg.hidden:
            raise ConfigError("hidden", f"must be a multiple of head_dim ({head_dim}), got {cfg.hidden}")
    kv_heads = heads if cfg.kv_heads is None else _int_at_least(cfg, "kv_heads", 1)
    if heads % kv_heads:
        raise ConfigError("kv_heads", f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    if cfg.dtype not in DTYPE_NAMES:
        raise ConfigError("dtype", f"must be one of {', '.join(DTYPE_NAMES)}, got {cfg.dtype!r}")
    if cfg.layout not in LAYOUTS:
        raise ConfigError("layout", f"must be one of {', '.join(LAYOUTS)}, got {cfg.layout!r}")
    if cfg.variant.name not in variants.names():
        raise ConfigError("variant.name", variants.registry.unknown_text(cfg.variant.name))
    bench = cfg.bench
    if not bench.warmup >= 0:
        raise ConfigError("bench.warmup", f"must be >= 0 ms, got {bench.warmup}")
    if not bench.rep > 0:
        raise ConfigError("bench.rep", f"must be > 0 ms, got {bench.rep}")
    if bench.cpu_warmup < 0:
        raise ConfigError("bench.cpu_warmup", f"must be >= 0, got {bench.cpu_warmup}")
    if bench.cpu_rep < 1:
        raise ConfigError("bench.cpu_rep", f"must be >= 1, got {bench.cpu_rep}")
    if not float(bench.get("ncu_timeout_s", 1.0)) > 0:
        raise ConfigError("bench.ncu_timeout_s", f"must be > 0 seconds, got {bench.ncu_timeout_s}")
    if not cfg.cpu_budget_s > 0:
        raise ConfigError("cpu_budget_s", f"must be > 0 seconds, got {cfg.cpu_budget_s}")
    if cfg.get("isolate", "auto") not in ISOLATE_CHOICES:
        raise ConfigError("isolate", f"must be auto, true or false, got {cfg.isolate!r}")
    if not float(cfg.get("point_timeout_s", 1.0)) > 0:
        raise ConfigError("point_timeout_s", f"must be > 0 seconds, got {cfg.point_timeout_s}")
    index = cfg.gpu.index
    if index != "auto" and (isinstance(index, bool) or not isinstance(index, int) or index < 0):
        raise ConfigError("gpu.index", f"must be an integer >= 0 or auto, got {index!r}")

    variant = variants.get(cfg.variant.name)
    overrides = {k: v for k, v in OmegaConf.to_container(cfg.blocks, resolve=True).items() if v is not None}
    packed = _packed_args(cfg, seq, seq_k)
    if packed:
        batch, seq, seq_k = len(packed["doc_lens"]), max(packed["doc_lens"]), max(packed["doc_lens"])
    point_args = dict(variant=variant.name, batch=batch, seq=seq, seq_k=seq_k, heads=heads, kv_heads=kv_heads,
                      head_dim=head_dim, causal=bool(cfg.causal), dtype=cfg.dtype, layout=cfg.layout, **packed,
                      **_modifier_args(cfg), forward=_forward_arg(cfg, variant), timed=_timed_arg(cfg),
                      **_mla_args(cfg, head_dim))
    problem = Point(**point_args, blocks=None, block_overrides=overrides).problem(device)
    try:
        problem.validate()  # a backstop: the checks above already cover what it checks
    except ValueError as exc:
        raise ConfigError("problem", str(exc).splitlines()[0]) from None
    try:
        blocks = variant.make_blocks(problem, overrides)
    except ValueError as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        first = message.split("=", 1)[0].split(":", 1)[0].strip()
        asked = Point(**point_args, blocks=RequestedBlocks(tuple(sorted(overrides.items()))), block_overrides=overrides)
        if first in overrides or first in _field_names(variant):  # "BLOCK_M=48: must be ..." names its field
            raise BlockRuleError(f"blocks.{first}", message, f"blocks.{message} (variant {variant.name})",
                                 asked) from None
        raise BlockRuleError("blocks", message, f"blocks: {message} (variant {variant.name})", asked) from None
    except TypeError as exc:  # a value of the wrong type inside the Blocks dataclass
        raise ConfigError("blocks", f"{str(exc).splitlines()[0]} (variant {variant.name})") from None
    return Point(**point_args, blocks=blocks, block_overrides=overrides)


def _mla_args(cfg, head_dim: int) -> dict:
    """The Point's issue-47 fields from `head_dim_v` (null or = head_dim: None) and `sink` (uniform or packed)."""
    head_dim_v = cfg.get("head_dim_v")
    if head_dim_v is not None:
        head_dim_v = _int_at_least(cfg, "head_dim_v", 1)
        if head_dim_v > MAX_HEAD_DIM:
            raise ConfigError("head_dim_v", f"must be in 1..{MAX_HEAD_DIM}, got {head_dim_v}")
        head_dim_v = None if head_dim_v == head_dim else head_dim_v
    sink = bool(cfg.get("sink") or False)
    return dict(head_dim_v=head_dim_v, sink=sink)


def _modifier_args(cfg) -> dict:
    """The Point's score-modifier fields from `window`, `window_right`, `softcap` and `gate` (issue 24), normalized
    as FlashAttention's window_size is (variants.problem.window_pair: causal -> right = 0)."""
    from variants.problem import window_pair
    window, right = cfg.get("window"), cfg.get("window_right")
    if window is not None:
        _int_at_least(cfg, "window", 0)
    if right is not None:
        _int_at_least(cfg, "window_right", 0)
        if window is None:
            raise ConfigError("window_right", "needs window= (the keys to the left; window_right alone is not a "
                                              "sliding window here)")
    softcap = cfg.get("softcap") or 0.0
    if not softcap >= 0:
        raise ConfigError("softcap", f"must be >= 0 (0 = off), got {softcap}")
    gate = bool(cfg.get("gate") or False)
    if gate and not cfg.causal:
        raise ConfigError("gate", "the forget gate needs causal=true (FLA's parallel_attn)")
    if gate and cfg.seq_k is not None and cfg.seq_k != cfg.seq:
        raise ConfigError("gate", f"the forget gate needs seq_k = seq, got seq_k={cfg.seq_k}, seq={cfg.seq}")
    left, right = window_pair(None if window is None else (window, window if right is None else right),
                              bool(cfg.causal))
    return dict(window_left=left, window_right=right, softcap=float(softcap), gate=gate)


def import_plugins(modules) -> None:
    """Imports each module named in `plugins` (they register variants with @register_variant); a module
    that fails to import is a ConfigError naming it."""
    import importlib

    for name in modules:
        try:
            importlib.import_module(str(name))
        except Exception as exc:  # noqa: BLE001 - ImportError, or the plugin's own error at import
            text = " ".join(str(exc).split()) or type(exc).__name__
            raise ConfigError("plugins", f"cannot import {name!r}: {type(exc).__name__}: {text}") from None


def _packed_args(cfg, seq: int, seq_k: int) -> dict:
    """{} for a uniform batch; else the Point fields of a packed varlen batch (its document lengths)."""
    from runners.point.varlen_inputs import DISTS, doc_lengths
    spec = cfg.get("varlen")
    if spec is None or spec.dist == "none":
        return {}
    if spec.dist not in DISTS:
        raise ConfigError("varlen.dist", f"must be one of {', '.join(DISTS)}, got {spec.dist!r}")
    if cfg.tokens is None:
        raise ConfigError("tokens", f"varlen={spec.dist} packs documents into `tokens` tokens: set tokens=")
    if seq_k != seq:
        raise ConfigError("seq_k", "varlen batches are self-attention here (k lengths = q lengths): leave seq_k null")
    if cfg.layout != "bnhd":
        raise ConfigError("layout", "varlen batches are [total, H, D] tensors: layout must be bnhd")
    tokens = _int_at_least(cfg, "tokens", 1)
    mean_len = seq if spec.mean_len is None else _int_at_least(spec, "mean_len", 1)
    if spec.max_len is not None:
        _int_at_least(spec, "max_len", 1)
    if not spec.sigma >= 0:
        raise ConfigError("varlen.sigma", f"must be >= 0, got {spec.sigma}")
    lens = doc_lengths(spec.dist, tokens, mean_len, float(spec.sigma), spec.max_len, int(spec.seed))
    text = f"{spec.dist},tokens={tokens},mean={mean_len},sigma={float(spec.sigma):g},max={spec.max_len},seed={spec.seed}"
    return dict(doc_lens=lens, varlen_dist=spec.dist, varlen_spec=text)


def _field_names(variant) -> set:
    from dataclasses import fields
    return {f.name for f in fields(variant.Blocks)}
