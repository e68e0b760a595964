"""attnc: sparse attention patterns compiled to fused CPU kernels.

    import attnc, torch
    kernel = attnc.compile("patterns/fixed.attn", l=128, c=8)
    q, k, v = (torch.randn(1, 8, 4096, 64, requires_grad=True) for _ in range(3))
    o = kernel(q, k, v)            # a torch.library custom op: autograd, torch.compile
    o.sum().backward()
    attnc.analyze("patterns/fixed.attn", n=4096)["heads"][0]["nnz"]
    svg = attnc.show("patterns/fixed.attn", n=512, l=64, c=8)

A pattern that reads data (``input b0 : int[n]``) takes it by name with every call:
``b0, b1 = attnc.lsh_buckets(qk, 64, 2, seed=0)``, ``kernel(qk, qk, v, b0=b0, b1=b1)``. So does
one whose ``score`` or ``sink`` reads float inputs (``input slope : float[heads]``):
``kernel(q, k, v, slope=slope)``, and a float input that requires grad gets its gradient.

:mod:`attnc.torch` (imported on first use with a tensor) holds the PyTorch
integration; numpy arrays work without torch. :mod:`attnc.distributed` (imported
on first use of ``attnc.distributed``) shares one sequence's attention across the
ranks of a torch.distributed group. :mod:`attnc.transformers` (``import attnc.transformers``;
needs Hugging Face transformers) registers attnc as a transformers attention implementation:
``attnc.transformers.register()``, then ``model.set_attn_implementation("attnc")``.
"""

from . import _api
from ._api import Kernel, analyze, cache_stats, compile, cpu_isa, load, show
from ._attnc import ABI_VERSION
from ._errors import AttncError, AttncWarning
from ._lsh import lsh_buckets

__version__ = "0.1.0"


def _load_torch():
    # Kernel.__call__'s first torch tensor: attnc.torch installs its attention() in attnc._api.
    import importlib

    return importlib.import_module(f"{__name__}.torch")


_api._load_torch = _load_torch


def __getattr__(name: str):
    # attnc.distributed, attnc.torch and attnc.transformers import torch (and transformers): only
    # when asked for.
    if name in ("distributed", "torch", "transformers"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'attnc' has no attribute {name!r}")

__all__ = [
    "ABI_VERSION",
    "AttncError",
    "AttncWarning",
    "Kernel",
    "analyze",
    "cache_stats",
    "compile",
    "cpu_isa",
    "load",
    "lsh_buckets",
    "show",
]
