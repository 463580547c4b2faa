"""Device and precision choice: CUDA when present, bf16 on CPUs that run it natively.

torch is imported where a device or dtype is made, not with the module: checking a search's device flags for a
model it may never load (``check_device_choice``) is no reason for its seconds of import."""
from __future__ import annotations

import contextlib
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from retriever.choices import DTYPES
from retriever.errors import RetrieverError

if TYPE_CHECKING:
    import torch


def check_device_choice(device: str = "auto", dtype: str = "auto", batch_size: int | None = None) -> None:
    """Refuse what ``resolve_device``, ``resolve_dtype`` and ``resolve_batch_size`` would refuse, asking torch only
    when the answer depends on the machine: auto with any dtype but fp16 is valid on every machine, so a bm25 search,
    which loads no model, checks its defaults without importing torch."""
    if device != "auto" or dtype == "fp16":
        resolved = resolve_device(device)
        resolve_dtype(dtype, resolved)
        resolve_batch_size(batch_size, resolved)
    else:
        _check_dtype_name(dtype)
        if batch_size is not None:
            _checked_batch_size(batch_size)


def resolve_device(device: str = "auto") -> torch.device:
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = parsed_device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise RetrieverError("--device cuda was asked for but no CUDA GPU is available; use --device cpu")
    if resolved.type == "cuda" and (resolved.index or 0) >= torch.cuda.device_count():
        raise RetrieverError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA GPU(s), numbered "
                             "from 0")
    return resolved



def parsed_device(device: str) -> torch.device:
    """The CPU or CUDA device ``device`` names, whether or not this machine has it (a Ray cluster's nodes may);
    any other name is refused: mps, xpu, meta... gave a traceback when the model moved."""
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):  # TypeError: None or another non-string
        parsed = None
    if parsed is None or parsed.type not in ("cpu", "cuda"):
        raise RetrieverError(f"unknown device {device!r}; use auto, cpu, cuda or cuda:N")
    return parsed

@lru_cache(maxsize=1)
def cpu_has_native_bf16() -> bool:
    """True when the CPU has bf16 matmul instructions (AVX512-BF16 or AMX); emulated bf16 is slower than fp32."""
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        return False
    flags = cpuinfo.read_text(errors="ignore")
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_batch_size(batch_size: int | None, device: torch.device) -> int:
    """Texts per forward pass: small on the CPU, where a 16-text batch's activations stay in cache and a 64-text
    batch's do not (benchmarks/README.md), large on a GPU, which needs wide batches to fill."""
    if batch_size is None:
        return 128 if device.type == "cuda" else 16
    return _checked_batch_size(batch_size)


def _checked_batch_size(batch_size: int) -> int:
    if isinstance(batch_size, bool) or not hasattr(batch_size, "__index__") or batch_size < 1:
        raise RetrieverError(f"batch size must be a whole number of at least 1, not {batch_size!r}")
    return int(batch_size)


def resolve_dtype(dtype: str, device: torch.device) -> str:
    """fp16 on CUDA, bf16 on CPUs that support it, otherwise fp32."""
    _check_dtype_name(dtype)
    if dtype != "auto":
        if dtype == "fp16" and device.type == "cpu":
            raise RetrieverError("fp16 is not supported on the CPU; use --dtype bf16 or fp32")
        return dtype
    if device.type == "cuda":
        return "fp16"
    return "bf16" if cpu_has_native_bf16() else "fp32"


def _check_dtype_name(dtype: str) -> None:
    if dtype not in DTYPES:
        raise RetrieverError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")


def torch_dtype(dtype: str) -> torch.dtype:
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]


def autocast(device: torch.device, dtype: str) -> contextlib.AbstractContextManager:
    """Mixed precision around a forward pass over fp32 weights (training, and the in-memory dev encoder)."""
    if dtype == "fp32":
        return contextlib.nullcontext()
    import torch

    return torch.autocast(device_type=device.type, dtype=torch_dtype(dtype))
