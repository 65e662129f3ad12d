"""The shared Triton forward's O and LSE against fp64, beside aten's FlashAttention-2, cuDNN and memory-efficient
forwards on the same inputs: max and mean |error|, and the mean signed error (a bias that training would
accumulate where random rounding would not).

    python scripts/forward_accuracy.py --out table.csv [--seqs 4096 16384] [--head-dims 64 128] [--q-scale 1 4]

Inputs: q, k, v ~ N(0, 1) in bf16, q multiplied by --q-scale (sharper softmax rows, as trained models have), causal.
Only query rows [--rows] at the end of the sequence are checked (the reference is built for them alone, in fp64).
Checks nothing and asserts nothing: it prints and writes a table.
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pandas as pd  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from kernels.forward import attention_forward  # noqa: E402


def reference(q, k, v, rows, scale):
    """fp64 O [rows, D], natural-log LSE [rows] and each row's largest probability [rows] of the last `rows` queries
    of one head (causal, Nq == Nk)."""
    n = q.shape[0]
    qs = q[n - rows:].double()
    s = (qs @ k.double().T) * scale  # [rows, N]
    keys = torch.arange(n, device=q.device)
    s = s.masked_fill(keys[None, :] > torch.arange(n - rows, n, device=q.device)[:, None], float("-inf"))
    lse = torch.logsumexp(s, dim=1)
    return torch.exp(s - lse[:, None]) @ v.double(), lse, torch.exp(s.max(dim=1).values - lse)


def sdpa_forward(backend, q, k, v, scale):
    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                                              scale=scale).transpose(1, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--seqs", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--q-scale", type=float, nargs="+", default=[1.0, 4.0])
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--rows", type=int, default=2048)
    args = parser.parse_args()
    rows_out = []
    for seq in args.seqs:
        for head_dim in args.head_dims:
            for q_scale in args.q_scale:
                gen = torch.Generator(device="cuda").manual_seed(seq + head_dim)
                q, k, v = (torch.randn(1, seq, args.heads, head_dim, device="cuda", generator=gen) for _ in range(3))
                q, k, v = (q * q_scale).bfloat16(), k.bfloat16(), v.bfloat16()
                scale = head_dim ** -0.5
                o_ours, lse2 = attention_forward(q, k, v, True, scale)
                outputs = {"triton_forward": o_ours}
                for name, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION),
                                      ("sdpa_efficient", SDPBackend.EFFICIENT_ATTENTION)):
                    try:
                        outputs[name] = sdpa_forward(backend, q, k, v, scale)
                    except RuntimeError as exc:
                        print(name, "skipped:", str(exc).splitlines()[0])
                for h in range(args.heads):
                    o_ref, lse_ref, _ = reference(q[0, :, h], k[0, :, h], v[0, :, h], args.rows, scale)
                    for name, o in outputs.items():
                        err = o[0, seq - args.rows:, h].double() - o_ref
                        row = dict(design=name, seq=seq, head_dim=head_dim, q_scale=q_scale, head=h,
                                   o_max_abs=err.abs().max().item(), o_mean_abs=err.abs().mean().item(),
                                   o_mean_signed=err.mean().item(),
                                   o_rel_fro=(err.norm() / o_ref.norm()).item())
                        if name == "triton_forward":
                            lse_err = lse2[0, h, seq - args.rows:].double() * math.log(2) - lse_ref
                            row.update(lse_max_abs=lse_err.abs().max().item(), lse_mean_signed=lse_err.mean().item())
                        rows_out.append(row)
    table = pd.DataFrame(rows_out)
    table.to_csv(args.out, index=False)  # a CSV: not a result table (plots and regress read parquet)
    pd.set_option("display.width", 250)
    summary = table.groupby(["seq", "head_dim", "q_scale", "design"])[
        ["o_max_abs", "o_mean_abs", "o_mean_signed", "o_rel_fro", "lse_max_abs", "lse_mean_signed"]].mean()
    print(summary.to_string(float_format=lambda x: f"{x:.3e}"))


if __name__ == "__main__":
    main()
