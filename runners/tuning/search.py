"""The samplers of a tuner study (runners/tune.py): which block fields are searched together, and one Optuna
TPE study per group. A study is decomposed per kernel when its fields are tagged with >= 2 kernels
(variants/blocks.py `tunable(..., kernel=...)`): each kernel's group is told that kernel's time from the row's
`kernel_ms`, a `shared` group of untagged fields the total ms; otherwise one joint group is told the total ms.
docs/tuning.md, "Per-kernel decomposition"."""
import dataclasses

from omegaconf import DictConfig

from runners.point.schema import ConfigError

DECOMPOSE_CHOICES = ("auto", True, False)
JOINT = "joint"  # the one group of a study that is not decomposed: every field, told the total ms
SHARED = "shared"  # a decomposed study's group of the untagged fields (they change several kernels): total ms


def startup_trials(cfg) -> int:
    return cfg.startup_trials if cfg.startup_trials is not None else min(10, max(3, int(cfg.trials) // 3))



def field_groups(cfg: DictConfig, blocks_cls, space: dict) -> list[tuple[str, str | None, list[str]]]:
    """[(group name, kernel whose time is its objective or None for the total ms, fields)]: one group per kernel
    tag among the searched fields plus a SHARED group of the untagged ones when decomposed, else one JOINT group.
    `decompose`: auto = decomposed when the fields span >= 2 kernels; true = decomposed (>= 2 groups needed)."""
    setting = cfg.get("decompose", "auto")
    if isinstance(setting, str) and setting.lower() in ("true", "false"):  # quoted on the command line
        setting = setting.lower() == "true"
    if setting not in DECOMPOSE_CHOICES or (setting != "auto" and not isinstance(setting, bool)):
        raise ConfigError("decompose", f"must be auto, true or false, got {setting!r}")
    tags = blocks_cls.field_kernels()
    by_kernel: dict = {}
    for name in space:
        by_kernel.setdefault(tags.get(name), []).append(name)
    kernels = [k for k in by_kernel if k is not None]
    if setting is True and len(by_kernel) < 2:
        raise ConfigError("decompose", f"true needs searched fields of >= 2 groups (kernels, shared); "
                                       f"{cfg.variant.name} searches {list(space)}: {kernels or 'no kernel'} tagged")
    if setting is False or (setting == "auto" and len(kernels) < 2):
        return [(JOINT, None, list(space))]
    groups = [(kernel, kernel, by_kernel[kernel]) for kernel in kernels]
    return groups + ([(SHARED, None, by_kernel[None])] if None in by_kernel else [])


@dataclasses.dataclass
class Group:
    """One Optuna study over some of the searched fields, told one objective per measured config."""
    name: str
    kernel: str | None  # its objective is this kernel's time in kernel_ms; None: the total ms
    space: dict
    study: object  # optuna.Study

    def params(self, config: dict) -> dict:
        return {k: config[k] for k in self.space}

    @property
    def dists(self) -> dict:
        from runners.tuning import trials as T
        return T.distributions(self.space)

    @property
    def short(self) -> str:
        return self.name.strip("_").removesuffix("_kernel")


class Search:
    """The samplers of a study: its groups' studies, asked together (the union of their params is the config)
    and told together (each its own objective), and `record`, the study of the measured configs (the joint
    group's own study when not decomposed)."""

    def __init__(self, cfg: DictConfig, name: str, space: dict, layout: list, out):
        import optuna

        from runners.tuning import trials as T

        self.space, self.dists, self.out, self.fell_back = space, T.distributions(space), out, False
        self.groups = []
        for index, (group, kernel, fields) in enumerate(layout):  # each group its own seeded sampler
            sampler = optuna.samplers.TPESampler(seed=int(cfg.sampler_seed) + index,
                                                 n_startup_trials=startup_trials(cfg))
            study = optuna.create_study(study_name=name if group == JOINT else f"{name}/{group}",
                                        direction="minimize", sampler=sampler)
            self.groups.append(Group(group, kernel, {k: space[k] for k in fields}, study))
        self.decomposed = len(self.groups) > 1
        self.record = (optuna.create_study(study_name=name, direction="minimize") if self.decomposed
                       else self.groups[0].study)

    def values(self, row: dict) -> tuple:
        """(state, {group name: objective}) of a row: its kernel's time, or the total ms for an untagged group and
        for every group when the row has no per-kernel time (said once)."""
        from optuna.trial import TrialState
        from runners.tuning import trials as T

        state, ms = T.outcome(row)
        if state != TrialState.COMPLETE:
            return state, {g.name: None for g in self.groups}
        values = {g.name: ms if g.kernel is None else T.kernel_value(row, g.kernel) for g in self.groups}
        if any(v is None for v in values.values()):
            if not self.fell_back:
                self.out(f"study {self.record.study_name}: a row without per-kernel times (kernel_ms; CPU interpreter "
                         f"or a profiler failure): its groups are told the total ms")
                self.fell_back = True
            values = {g.name: ms for g in self.groups}
        return state, values

    def add(self, params: dict, row: dict) -> None:
        """A restored row: one finished trial in every group (and in the record)."""
        from runners.tuning import trials as T

        _, values = self.values(row)
        for g in self.groups:
            g.study.add_trial(T.frozen_trial(row, g.params(params), g.dists, values[g.name]))
        if self.decomposed:
            self.record.add_trial(T.frozen_trial(row, params, self.dists))

    def enqueue(self, params: dict) -> None:
        for g in self.groups:
            g.study.enqueue_trial(g.params(params))

    def ask(self) -> tuple[list, dict]:
        """(one trial per group, the config: their params joined)."""
        trials = [g.study.ask(g.dists) for g in self.groups]
        return trials, _joined([t.params for t in trials], self.space)

    def tell(self, trials: list, row: dict | None, params: dict, new: bool) -> None:
        """Tells every group its objective of `row` (None: the row could not be read back, a FAIL); a new row
        also gives the trials its status / reason attributes and goes into the record."""
        from optuna.trial import TrialState
        from runners.tuning import trials as T

        if row is None:
            for g, trial in zip(self.groups, trials):
                g.study.tell(trial, state=TrialState.FAIL)
            return
        state, values = self.values(row)
        for g, trial in zip(self.groups, trials):
            if new:
                for k, v in T.user_attrs(row).items():
                    trial.set_user_attr(k, v)
            g.study.tell(trial, values[g.name], state=state)
        if new and self.decomposed:
            self.record.add_trial(T.frozen_trial(row, params, self.dists))

    def tell_dead(self, trials: list, dead) -> None:
        """A config filtered before measuring (runners/tuning/feasibility.py): no row, PRUNED with status `filtered`
        and the reason, in the groups it concerns: a group whose kernel is not among the failing kernels is told
        FAIL (TPE leaves FAIL trials out of its model), unless that would leave every group uninformed."""
        from optuna.trial import TrialState
        from runners.tuning.feasibility import FILTERED

        concerned = [not dead.kernels or g.kernel is None or g.kernel in dead.kernels for g in self.groups]
        if not any(concerned):
            concerned = [True] * len(self.groups)
        for g, trial, pruned in zip(self.groups, trials, concerned):
            trial.set_user_attr("status", FILTERED)
            trial.set_user_attr("reason", dead.reason)
            g.study.tell(trial, state=TrialState.PRUNED if pruned else TrialState.FAIL)

    def _best_trials(self) -> list:
        from optuna.trial import TrialState

        best = []
        for g in self.groups:
            done = g.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            best.append(min(done, key=lambda t: t.value) if done else None)
        return best

    def combined(self) -> dict | None:
        """Every group's best params (by its own objective) joined; None while a group has no complete trial."""
        best = self._best_trials()
        return None if any(t is None for t in best) else _joined([t.params for t in best], self.space)

    def progress(self) -> str:
        """' | dkdv 1.26, dq 0.84, shared 2.2': every group's best objective (ms), when decomposed."""
        if not self.decomposed:
            return ""
        parts = [f"{g.short} {t.value:.4g}" if t else f"{g.short} -" for g, t in zip(self.groups, self._best_trials())]
        return " | " + ", ".join(parts)

    def describe(self) -> str:
        if not self.decomposed:
            return "one joint study"
        return "decomposed: " + "; ".join(f"{g.short} ({', '.join(g.space)})" for g in self.groups)


def _joined(parts: list[dict], space: dict) -> dict:
    """The groups' params as one config, in the space's field order."""
    params = {k: v for part in parts for k, v in part.items()}
    return {k: params[k] for k in space}
