"""Which configs of a study cannot run, known before a trial is spent on them (issue 43; docs/tuning.md, "Dead
configs are filtered, not trials").

Two checks, in this order, each result cached per config for the study:
- the block rules: `schema.check` of the trial's config (`variant.make_blocks` / `Blocks.check_rules`), pure Python;
- on a GPU, the compile check for that GPU's architecture (`runners.compile.resources.check`, the code of
  `python -m runners.compile_check`): every kernel of the config is compiled for the GPU's compute capability, and
  a kernel that does not fit (shared memory, threads, no program per SM), does not compile or is `unsupported` there
  makes the config dead. Seconds per new config (a ws config: ~9-13 s on 2 busy cores, 0.4 s when Triton's cache
  has its kernels). Off in the CPU interpreter: kernels imported for the interpreter cannot be compiled in the same
  process, and the interpreter enforces no GPU limit, so no config is dead there for these reasons.

A dead config is never measured and never counted in `trials`: runners.tune tells the samplers it is PRUNED (status
`filtered`, the reason) and asks again. A compile check that itself fails (not the kernel: the check) filters
nothing and is turned off for the study, said once.
"""
from __future__ import annotations

import dataclasses

from runners.tuning import trials as T

FILTERED = "filtered"  # the user-attr status of a sampler trial whose config was filtered (no row, no trial)


@dataclasses.dataclass(frozen=True)
class Dead:
    """Why a config cannot run: `kind` for the study's summary, `reason` one line, `kernels` the kernels that failed
    (empty: the whole config, e.g. a block rule)."""
    kind: str
    reason: str
    kernels: tuple = ()


def dead_kind(status: str) -> str:
    """A compile-check row's status -> the short kind the summary counts ('shared memory', 'compile error', ...)."""
    if "shared memory" in status:
        return "shared memory"
    if status.startswith("OutOfResources"):
        return status.removeprefix("OutOfResources:").split("(")[0].split(",")[0].strip() or "resources"
    return "compile error" if status.startswith("compile error") else status.split(":")[0]


def compile_verdict(point, arch) -> Dead | None:
    """The compile check of one resolved point (every block field given, as it will run) on `arch`
    (runners/compile/arch_limits.py): Dead naming the failing kernels, or None when every kernel fits."""
    from runners.compile import resources

    window = point.window_left if point.window_left >= 0 else None
    modifiers = dict(window=window, softcap=point.softcap, gate=point.gate)
    rows = resources.check(point.variant, point.head_dim, point.dtype, point.causal, point.heads, point.kv_heads,
                           point.blocks_dict, arch=arch, modifiers=modifiers)
    bad = [r for r in rows if r["status"] != "ok"]
    if not bad:
        return None
    first = bad[0]
    return Dead(f"{dead_kind(first['status'])} on {arch.name}",
                f"{first['kernel']}: {first['status']} (compile check, {arch.name})",
                tuple(dict.fromkeys(r["kernel"] for r in bad)))


def gpu_compile_checker(environment: dict, variant_name: str):
    """(point -> Dead | None, what it is) for this machine: the compile check for the GPU's architecture, or
    (None, why not): the CPU interpreter, a baseline (no Triton kernels), an architecture arch_limits does not know."""
    import variants
    from runners.compile.arch_limits import ARCHS
    from runners.point import env
    from variants.base import TritonVariant

    if env.interpreting():
        return None, "compile check off (CPU interpreter)"
    if not isinstance(variants.get(variant_name), TritonVariant):
        return None, "compile check off (no Triton kernels)"
    capability = environment.get("compute_capability")
    arch = next((a for a in ARCHS.values() if a.table_key == capability), None)
    if arch is None:
        return None, f"compile check off (compute capability {capability} not in runners/compile/arch_limits.py)"
    return (lambda point: compile_verdict(point, arch)), f"compile check for {arch.name}"


class Feasibility:
    """The dead-config filter of one study: `dead(params)` (cached per config), counts for the summary."""

    def __init__(self, check_rules, compile_check=None, about: str = "", out=print):
        """check_rules(params) -> (point, None) or (None, rule text); compile_check(point) -> Dead | None."""
        self.check_rules, self.compile_check, self.about, self.out = check_rules, compile_check, about, out
        self.cache: dict[str, Dead | None] = {}  # params key -> verdict
        self.points: dict[str, object] = {}  # params key -> its checked point (a live config)
        self.compile_checks = 0

    def dead(self, params: dict) -> Dead | None:
        key = T.params_key(params)
        if key not in self.cache:
            self.cache[key] = self._verdict(key, params)
        return self.cache[key]

    def point(self, params: dict):
        """The checked point of a live config (dead() first)."""
        return self.points.get(T.params_key(params))

    def _verdict(self, key: str, params: dict) -> Dead | None:
        point, rule = self.check_rules(params)
        if rule is not None:
            return Dead("block rule", f"invalid blocks: {rule}")
        self.points[key] = point
        if self.compile_check is None:
            return None
        self.compile_checks += 1
        try:
            return self.compile_check(point)
        except Exception as exc:  # noqa: BLE001 - the check failed, not the kernel: filter nothing from now on
            from runners.point.measure import one_line

            self.out(f"{self.about} failed ({one_line(exc)}): turned off for this study, nothing filtered by it")
            self.compile_check = None
            return None

    @property
    def filtered(self) -> dict[str, int]:
        """{kind: distinct dead configs drawn}."""
        counts: dict[str, int] = {}
        for verdict in self.cache.values():
            if verdict is not None:
                counts[verdict.kind] = counts.get(verdict.kind, 0) + 1
        return counts

    def summary(self) -> str:
        """'8 configs filtered before measuring (5 shared memory on sm90, 3 block rule)' or '' when none."""
        counts = self.filtered
        if not counts:
            return ""
        total = sum(counts.values())
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        return f"{total} config{'s' if total != 1 else ''} filtered before measuring, not trials ({kinds})"
