"""Training agreement, the model-step benchmark's accuracy gate: `steps` AdamW steps from the same initialization
and the same batches; a design's loss curve against the baseline's (an SDPA backend), judged by the baseline's own
run-to-run spread measured in the same process (two identical baseline runs). A design further from the baseline
than max(spread, loss_floor) at any step, or with a non-finite loss, is `wrong`."""
import math

import torch

from runners.model import decoder
from runners.model.config import ModelConfig


def new_optimizer(model, config: ModelConfig, device: str):
    return torch.optim.AdamW(model.parameters(), lr=config.lr, **({"fused": True} if device == "cuda" else {}))


def train_step(run, model, optimizer, tokens, targets, config: ModelConfig, mark_step: bool) -> torch.Tensor:
    """One forward + backward + optimizer step of `run` (the model or its compiled form) -> the loss (detached)."""
    if mark_step:  # CUDA graphs (reduce-overhead): a new step begins; the previous step's outputs may be overwritten
        torch.compiler.cudagraph_mark_step_begin()
    optimizer.zero_grad(set_to_none=True)
    loss = decoder.loss_of(run, tokens, targets, config)
    loss.backward()
    optimizer.step()
    return loss.detach().clone()


def loss_curve(run, model, init_state: dict, config: ModelConfig, seed: int, device: str,
               mark_step: bool = False) -> list[float]:
    """The losses of `config.steps` steps from `init_state`, on the batches of `seed`."""
    model.load_state_dict(init_state)
    optimizer = new_optimizer(model, config, device)
    losses = [train_step(run, model, optimizer, *decoder.batch_of(config, step, seed, device), config, mark_step)
              for step in range(config.steps)]
    return [float(loss) for loss in losses]


def max_deviation(curve: list[float], reference: list[float]) -> float:
    """max over steps of |curve - reference|; inf if either has a non-finite loss."""
    if not all(math.isfinite(x) for x in [*curve, *reference]):
        return math.inf
    return max(abs(a - b) for a, b in zip(curve, reference))


def verdict(deviation: float, spread: float, floor: float) -> tuple[bool, float, str | None]:
    """(correct, tolerance, reason if not)."""
    tolerance = max(spread, floor)
    if deviation <= tolerance:
        return True, tolerance, None
    return False, tolerance, (f"loss curve off the baseline by {deviation:.4g} (max over steps), beyond its own "
                              f"run-to-run spread {spread:.4g} (floor {floor:g})")
