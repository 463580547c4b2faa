import pytest
import torch

from retriever.device import resolve_batch_size, resolve_device, resolve_dtype
from retriever.errors import RetrieverError


def test_batch_size_defaults_by_device_and_keeps_an_explicit_choice():
    assert resolve_batch_size(None, torch.device("cpu")) == 16
    assert resolve_batch_size(None, torch.device("cuda")) == 128
    assert resolve_batch_size(48, torch.device("cpu")) == 48
    with pytest.raises(RetrieverError, match="at least 1"):
        resolve_batch_size(0, torch.device("cpu"))


@pytest.mark.parametrize("batch_size", [2.5, "8", True])
def test_a_batch_size_that_is_no_whole_number_is_refused_at_once(batch_size):
    """2.5 was taken and failed at the first encode (a TypeError); "8" failed at once with a TypeError."""
    with pytest.raises(RetrieverError, match=rf"^batch size must be a whole number of at least 1, not "):
        resolve_batch_size(batch_size, torch.device("cpu"))


def test_dtype_auto_is_fp16_on_cuda_and_fp16_is_refused_on_the_cpu():
    assert resolve_dtype("auto", torch.device("cuda")) == "fp16"
    assert resolve_dtype("auto", torch.device("cpu")) in ("bf16", "fp32")
    assert resolve_dtype("fp32", torch.device("cpu")) == "fp32"
    with pytest.raises(RetrieverError, match="fp16 is not supported on the CPU"):
        resolve_dtype("fp16", torch.device("cpu"))


def test_unknown_device_is_a_clear_error():
    with pytest.raises(RetrieverError, match="unknown device"):
        resolve_device("tpu")


@pytest.mark.parametrize("device", ["mps", "xpu", "meta", "hpu:0"])
def test_devices_torch_knows_but_retriever_does_not_use_are_one_line(device):
    """Each was a traceback (RuntimeError, AssertionError, NotImplementedError) once the model moved there."""
    with pytest.raises(RetrieverError, match=f"unknown device '{device}'; use auto, cpu, cuda or cuda:N"):
        resolve_device(device)


def test_a_gpu_number_past_the_machines_gpus_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(RetrieverError, match="this machine has 2 CUDA GPU"):
        resolve_device("cuda:2")
