"""Training agreement, the model-step benchmark's accuracy gate: `steps` AdamW steps from the same initialization
and the same batches; a design's loss curve against the baseline's (an SDPA backend), judged by the baseline's own
run-to-run spread measured in the same process (two identical baseline runs). A design further from the baseline
than max(spread, loss_floor) at any step, or with a non-finite loss, is `wrong`.

With an fp32 truth (`truth=fp32`, the default for fp16 / bf16 models): the same steps with attention computed in
fp32 (decoder.TRUTH), and every SDPA backend that runs the model trained too. A design is then judged by its
distance to the truth, against the farthest SDPA backend's distance plus the baseline's spread: it is `wrong` only
if it is further from fp32 attention than every SDPA implementation is. The baseline columns stay in the row. (Why:
a design with its own rounding, as accurate as cuDNN's against fp32, may still sit further from FA2's curve than
FA2 sits from itself, and the first gate alone calls that wrong; results/h100/model_step/README.md.)"""
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


def truth_verdict(deviation: float, sdpa_deviation: float, spread: float, floor: float
                  ) -> tuple[bool, float, str | None]:
    """(correct, tolerance, reason if not) against the fp32 truth: deviation (the design's from the truth) within
    max(sdpa_deviation + spread, floor), sdpa_deviation being the farthest SDPA backend's."""
    tolerance = max(sdpa_deviation + spread, floor)
    if deviation <= tolerance:
        return True, tolerance, None
    return False, tolerance, (f"loss curve off the fp32-attention truth by {deviation:.4g} (max over steps), beyond "
                              f"the farthest SDPA backend's {sdpa_deviation:.4g} plus the baseline's spread "
                              f"{spread:.4g} (floor {floor:g})")


def verdict(deviation: float, spread: float, floor: float) -> tuple[bool, float, str | None]:
    """(correct, tolerance, reason if not)."""
    tolerance = max(spread, floor)
    if deviation <= tolerance:
        return True, tolerance, None
    return False, tolerance, (f"loss curve off the baseline by {deviation:.4g} (max over steps), beyond its own "
                              f"run-to-run spread {spread:.4g} (floor {floor:g})")
