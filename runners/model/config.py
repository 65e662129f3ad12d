"""The model-step benchmark's config: conf/model/<name>.yaml plus `key=value` overrides, checked into a ModelConfig.

Hydra is not needed (a GPU machine may not have it): the files are flat `key: value` YAML, read with PyYAML (a
dependency the block-defaults table needs anyway). A bad value is a one-line ConfigError naming the key.
"""
from dataclasses import dataclass, fields
from pathlib import Path

import yaml

from runners.point.env import CONF_DIR

MODEL_DIR = Path(CONF_DIR) / "model"
DTYPE_NAMES = ("fp32", "fp16", "bf16")


class ConfigError(ValueError):
    """One line: the key, and what is wrong with it."""


@dataclass(frozen=True)
class ModelConfig:
    name: str
    layers: int
    d_model: int
    heads: int
    kv_heads: int
    head_dim: int
    seq: int
    batch: int
    vocab: int
    dtype: str
    causal: bool
    lag: int
    lr: float
    steps: int
    loss_floor: float
    warmup: int
    rep: int

    def label(self) -> str:
        return (f"{self.name}: L{self.layers} d{self.d_model} H{self.heads}/{self.kv_heads} D{self.head_dim} "
                f"B{self.batch} N{self.seq} {self.dtype}{' causal' if self.causal else ''}")


def model_names() -> list[str]:
    return sorted(p.stem for p in MODEL_DIR.glob("*.yaml"))


def read_flat_yaml(path: Path) -> dict:
    """{key: scalar} of a flat YAML file."""
    return dict(yaml.safe_load(path.read_text()) or {})


def _typed(key: str, value, kind):
    if kind is bool:
        if isinstance(value, bool):
            return value
        if str(value).lower() in ("true", "false"):
            return str(value).lower() == "true"
        raise ConfigError(f"{key} must be true or false, got {value!r}")
    try:
        typed = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key} must be {kind.__name__}, got {value!r}") from None
    if kind is int and typed != float(value):
        raise ConfigError(f"{key} must be an integer, got {value!r}")
    return typed


def load(name: str, overrides: dict | None = None) -> ModelConfig:
    """conf/model/<name>.yaml with overrides (strings or values) -> a checked ModelConfig."""
    path = MODEL_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"model={name!r}: no conf/model/{name}.yaml; known: {', '.join(model_names())}")
    values = {**read_flat_yaml(path), **(overrides or {})}
    kinds = {f.name: f.type if isinstance(f.type, type) else eval(f.type) for f in fields(ModelConfig)}  # noqa: S307
    unknown = sorted(set(values) - set(kinds))
    if unknown:
        raise ConfigError(f"unknown model key(s) {unknown}; known: {sorted(set(kinds) - {'name'})}")
    missing = sorted(set(kinds) - set(values) - {"name"})
    if missing:
        raise ConfigError(f"conf/model/{name}.yaml lacks {missing}")
    config = ModelConfig(name=name, **{key: _typed(key, value, kinds[key]) for key, value in values.items()})
    check(config)
    return config


def check(config: ModelConfig) -> None:
    for key in ("layers", "d_model", "heads", "kv_heads", "head_dim", "seq", "batch", "vocab", "steps", "rep"):
        if getattr(config, key) < 1:
            raise ConfigError(f"{key} must be >= 1, got {getattr(config, key)}")
    if config.warmup < 0:
        raise ConfigError(f"warmup must be >= 0, got {config.warmup}")
    if config.heads % config.kv_heads:
        raise ConfigError(f"heads ({config.heads}) must be a multiple of kv_heads ({config.kv_heads})")
    if config.dtype not in DTYPE_NAMES:
        raise ConfigError(f"dtype must be one of {DTYPE_NAMES}, got {config.dtype!r}")
    if not 1 <= config.lag < config.seq:
        raise ConfigError(f"lag must be in [1, seq), got {config.lag} (seq {config.seq})")
    if config.vocab < 2:
        raise ConfigError(f"vocab must be >= 2, got {config.vocab}")
    if config.lr <= 0 or config.loss_floor < 0:
        raise ConfigError(f"lr must be > 0 and loss_floor >= 0, got lr {config.lr}, loss_floor {config.loss_floor}")
