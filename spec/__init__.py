"""What a problem may be: names and limits shared by runners/ (config checks) and variants/ (input checks).

One home for them that imports nothing (no torch, no kernels): ``runners/point/schema.py`` checks a config with these
without importing ``variants`` (whose ``__init__`` imports every variant and so the Triton kernels).
"""
DTYPE_NAMES = ("bf16", "fp16", "fp32")  # variants.problem.DTYPES maps each to its torch dtype
LAYOUTS = ("bnhd", "bhnd")  # bnhd: [B, N, H, D] tensors; bhnd: [B, H, N, D] tensors passed as transposed views
MAX_HEAD_DIM = 256  # head dims 1..256 (a block is padded to the next power of two)
# what a sweep row times (runners/point/timed.py): the backward alone (the default, every row before issue 42), the
# forward alone, or a training pass (forward + backward in one call)
TIMED = ("backward", "forward", "train")
