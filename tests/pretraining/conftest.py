"""Pre-training tests run tiny models on one thread."""
from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny matrices gain nothing from threads, and on a shared CPU two spinning threads run ~20x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
