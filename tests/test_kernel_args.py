"""No kernel takes a wall of arguments (issue 23): every launched Triton and Gluon kernel (a jitted function named
`*_kernel` in kernels/) takes at most MAX_ARGS, its tensors, strides, sizes and layouts grouped in tuples
(kernels/backward_args.py, docs/interface.md "The variants")."""
import importlib
import inspect
import pkgutil

import pytest
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

import kernels

MAX_ARGS = 30


def launched_kernels() -> dict:
    """{module.name: its Python function} of every jitted `*_kernel` in the kernels package (Gluon included; the
    interpreter's InterpretedFunction too: the CPU tests run with TRITON_INTERPRET=1)."""
    found = {}
    for info in pkgutil.walk_packages(kernels.__path__, "kernels."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if isinstance(obj, (JITFunction, InterpretedFunction)) and name.endswith("_kernel") \
                    and obj.fn.__module__ == info.name:
                found[f"{info.name}.{name}"] = obj.fn
    return found


def test_the_kernels_are_found():
    names = {key.rsplit(".", 1)[1] for key in launched_kernels()}
    assert {"_fwd_kernel", "_dkdv_kernel", "_dq_kernel", "_fused_kernel", "_atomic_tma_kernel"} <= names
    from kernels.gluon.compat import GLUON_MISSING
    if GLUON_MISSING is None:
        assert {"_ws_backward_kernel", "_ws_dq_kernel"} <= names


@pytest.mark.parametrize("name", sorted(launched_kernels()))
def test_kernel_takes_few_arguments(name):
    params = inspect.signature(launched_kernels()[name]).parameters
    assert len(params) <= MAX_ARGS, f"{name} takes {len(params)} arguments: group them (kernels/backward_args.py)"
