"""Where a measurement ran: device, GPU and its peak numbers, software versions, code commit.

`use_interpreter_without_gpu()` must run before `import variants`: the kernels' @triton.jit decorators
read TRITON_INTERPRET when they are imported.
"""
import datetime
import functools
import hashlib
import ctypes
import os
import platform
import re
import socket
import subprocess
import sys
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONF_DIR = REPO / "conf"
CPU_DEVICE = "cpu-interpreter"
MEASURING_CODE = ("kernels", "variants", "runners", "conf")  # what a measurement depends on (resume key)


def use_interpreter_without_gpu() -> bool:
    """Turns the Triton interpreter on (TRITON_INTERPRET=1) when CUDA is not available; True when the
    runner is in interpreter mode (tensors on the CPU, timings not meaningful)."""
    if not cuda_available() and os.environ.get("TRITON_INTERPRET") != "1":
        if "variants" in sys.modules:
            warnings.warn("variants was imported before TRITON_INTERPRET=1 was set: its Triton kernels "
                          "will not run on the CPU", stacklevel=2)
        os.environ["TRITON_INTERPRET"] = "1"
    return interpreting()


def cuda_available() -> bool:
    """torch.cuda.is_available(), without importing torch (seconds on a 2-core machine) where no CUDA driver can be
    loaded: then CUDA cannot be available to torch either."""
    if "torch" not in sys.modules:
        try:
            ctypes.CDLL("libcuda.so.1")
        except OSError:
            return False
    import torch

    return torch.cuda.is_available()


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def device_kind() -> str:
    """The device a config is checked for (runners.point.schema.check): "cpu" under the interpreter, else "cuda"."""
    return "cpu" if interpreting() else "cuda"


def torch_device(gpu_index: int) -> str:
    """The torch device string tensors are built on: "cuda:<index>", or "cpu" under the interpreter."""
    return "cpu" if interpreting() else f"cuda:{gpu_index}"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def arch_specs() -> dict:
    """The per-arch gpu/*.yaml files (all but auto.yaml): file stem -> their content."""
    from omegaconf import OmegaConf

    specs = {}
    for path in sorted((CONF_DIR / "gpu").glob("*.yaml")):
        if path.stem != "auto":
            specs[path.stem] = OmegaConf.to_container(OmegaConf.load(path))
    return specs


def match_arch(device_name: str) -> str | None:
    """The gpu/*.yaml stem whose `match` substrings occur in the device name (case-insensitive)."""
    for stem, spec in arch_specs().items():
        if any(m.lower() in device_name.lower() for m in spec.get("match") or []):
            return stem
    return None


PEAK_KEYS = ("peak_tflops_bf16", "peak_tflops_fp16", "peak_tflops_fp32", "mem_bandwidth_tbs")


def gpu_spec(gpu_cfg: dict, device_name: str | None) -> dict:
    """Peak numbers and the results folder name (`gpu`) for the configured GPU.

    gpu=auto: the numbers of the gpu/*.yaml matching the detected name (None if none matches);
    a named gpu config: its numbers (a warning if the detected GPU does not match it)."""
    spec = {key: gpu_cfg.get(key) for key in PEAK_KEYS}
    if device_name is None:
        return {**{key: None for key in PEAK_KEYS}, "gpu": CPU_DEVICE, "gpu_spec": None}
    if gpu_cfg.get("name") == "auto":
        stem = match_arch(device_name)
        if stem is None:
            return {**spec, "gpu": slug(device_name), "gpu_spec": None}
        found = arch_specs()[stem]
        return {**{key: found.get(key) for key in PEAK_KEYS}, "gpu": slug(found["name"]), "gpu_spec": stem}
    matches = gpu_cfg.get("match") or []
    if matches and not any(m.lower() in device_name.lower() for m in matches):
        print(f"warning: gpu={gpu_cfg.get('name')!r} configured but the device is {device_name!r}; "
              f"its peak numbers may not apply", file=sys.stderr)
    return {**spec, "gpu": slug(gpu_cfg["name"]), "gpu_spec": gpu_cfg["name"]}


def _run(args: list[str], cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


@functools.cache
def code_version() -> dict:
    """commit (git HEAD, else "unknown"; $FLASH_BWD_COMMIT wins when set: a copy of the tree exported with
    `git archive` may sit inside another checkout whose HEAD is not its commit), dirty (tracked files differ from
    HEAD; None under $FLASH_BWD_COMMIT), diff_hash (short hash of `git diff HEAD` over the code that measures:
    kernels/, variants/, runners/, conf/; "" when those are clean). Resume treats a different diff_hash as
    different code."""
    if os.environ.get("FLASH_BWD_COMMIT"):
        return {"commit": os.environ["FLASH_BWD_COMMIT"], "dirty": None, "diff_hash": ""}
    commit = _run(["git", "rev-parse", "HEAD"], REPO)
    if commit is None:
        return {"commit": "unknown", "dirty": None, "diff_hash": ""}
    dirty = bool(_run(["git", "status", "--porcelain", "--untracked-files=no"], REPO))
    diff = _run(["git", "diff", "HEAD", "--", *MEASURING_CODE], REPO) or ""
    return {"commit": commit, "dirty": dirty, "diff_hash": hashlib.sha1(diff.encode()).hexdigest()[:12] if diff else ""}


@functools.cache
def _device_info(gpu_index: int) -> dict:
    import torch
    import triton

    info = {"torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
            "python": platform.python_version(), "hostname": socket.gethostname(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    if interpreting():
        return {**info, "device": CPU_DEVICE, "gpu_name": CPU_DEVICE, "compute_capability": None,
                "sm_count": None, "gpu_mem_bytes": None, "driver": None, "gpu_index": None, "gpu_uuid": None}
    from runners.isolation import lease

    physical = lease.physical_indices(info["cuda_visible_devices"], torch.cuda.device_count())[gpu_index]
    info.update(gpu_index=physical, gpu_uuid=lease.device_uuid(gpu_index))  # the node's numbering, the board
    props = torch.cuda.get_device_properties(gpu_index)
    driver = _run(["nvidia-smi", f"--id={gpu_index}", "--query-gpu=driver_version", "--format=csv,noheader"])
    if not driver:
        getter = getattr(torch._C, "_cuda_getDriverVersion", None)
        driver = f"cuda-driver-api-{getter()}" if getter else None
    return {**info, "device": "cuda", "gpu_name": torch.cuda.get_device_name(gpu_index),
            "compute_capability": f"{props.major}.{props.minor}", "sm_count": props.multi_processor_count,
            "gpu_mem_bytes": props.total_memory, "driver": driver.splitlines()[0] if driver else None}


def environment(gpu_cfg: dict) -> dict:
    """Every environment column of a row (timestamp excluded), for the configured GPU."""
    info = _device_info(int(gpu_cfg.get("index", 0)))
    spec = gpu_spec(gpu_cfg, None if info["device"] == CPU_DEVICE else info["gpu_name"])
    return {**info, **spec, **code_version()}


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")
