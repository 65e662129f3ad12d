"""The shared Triton forward on a trained model's own q, k, v: gpt_d128 (or another conf/model) trained `--steps`
AdamW steps with sdpa_flash, then one more forward whose attention inputs are kept; per layer and head, O and LSE of
the Triton forward, aten's FA2 and cuDNN forwards against fp64 on the last `--rows` queries, and how peaked the rows
are (mean of each row's largest probability).

    python scripts/model_forward_accuracy.py --out table.csv [--model gpt_d128] [--seq 16384] [--steps 40]

Checks nothing: it prints and writes a table (issue 27: which property of the forward makes training drift).
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pandas as pd  # noqa: E402
import torch  # noqa: E402

from kernels.forward import attention_forward  # noqa: E402
from runners.model import agreement, decoder, config as model_config  # noqa: E402
from scripts.forward_accuracy import reference, sdpa_forward  # noqa: E402
from torch.nn.attention import SDPBackend  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default="gpt_d128")
    parser.add_argument("--seq", type=int, default=16384)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rows", type=int, default=1024)
    args = parser.parse_args()
    config = model_config.load(args.model, {"seq": args.seq, "steps": args.steps})
    torch.manual_seed(0)
    model = decoder.Decoder(config, "sdpa_flash").cuda()
    agreement.loss_curve(model, model, model.state_dict(), config, seed=0, device="cuda")  # trains in place
    kept = []
    attention = decoder.attention

    def keep(q, k, v, **kwargs):
        kept.append((q.detach().clone(), k.detach().clone(), v.detach().clone()))
        return attention(q, k, v, **kwargs)

    decoder.attention = keep
    with torch.no_grad():
        decoder.loss_of(model, *decoder.batch_of(config, args.steps, 0, "cuda"), config)
    decoder.attention = attention
    rows = []
    scale = config.head_dim ** -0.5
    for layer, (q, k, v) in enumerate(kept):
        q, k, v = q[:1], k[:1], v[:1]  # the first sequence of the batch
        outputs = {"triton_forward": attention_forward(q, k, v, True, scale)}
        outputs["sdpa_flash"] = sdpa_forward(SDPBackend.FLASH_ATTENTION, q, k, v, scale)
        outputs["sdpa_cudnn"] = sdpa_forward(SDPBackend.CUDNN_ATTENTION, q, k, v, scale)
        flash = torch.ops.aten._scaled_dot_product_flash_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                                   v.transpose(1, 2), 0.0, True, False, scale=scale)
        lse_flash = flash[1]  # [1, H, N] natural log
        o_ours, lse2 = outputs["triton_forward"]
        outputs["triton_forward"] = o_ours
        seq = q.shape[1]
        for h in range(q.shape[2]):
            hk = h // (q.shape[2] // k.shape[2])
            o_ref, lse_ref, row_peak = reference(q[0, :, h], k[0, :, hk], v[0, :, hk], args.rows, scale)
            peak = row_peak.mean().item()
            lse_errors = {"triton_forward": lse2[0, h, seq - args.rows:].double() * math.log(2) - lse_ref,
                          "sdpa_flash": lse_flash[0, h, seq - args.rows:].double() - lse_ref}
            for name, o in outputs.items():
                err = o[0, seq - args.rows:, h].double() - o_ref
                row = dict(design=name, layer=layer, head=h, peak=peak, o_max_abs=err.abs().max().item(),
                           o_mean_abs=err.abs().mean().item(), o_mean_signed=err.mean().item(),
                           o_rel_fro=(err.norm() / o_ref.norm()).item(), o_ref_rms=o_ref.pow(2).mean().sqrt().item())
                if name in lse_errors:
                    row.update(lse_max_abs=lse_errors[name].abs().max().item(),
                               lse_mean_signed=lse_errors[name].mean().item())
                rows.append(row)
    table = pd.DataFrame(rows)
    table.to_csv(args.out, index=False)  # a CSV: not a result table (plots and regress read parquet)
    pd.set_option("display.width", 250)
    print(table.groupby(["layer", "head", "design"])[["peak", "o_max_abs", "o_mean_abs", "o_mean_signed", "o_rel_fro",
                                                       "lse_max_abs", "lse_mean_signed"]].mean()
          .to_string(float_format=lambda x: f"{x:.3e}"))


if __name__ == "__main__":
    main()
