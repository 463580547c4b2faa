"""Pre-training settings (``retriever.pretraining.config``): ``PretrainConfig.check`` refuses what no run could use
before anything loads."""
from __future__ import annotations

import re

import pytest

from fixtures_system import as_torchrun_process
from pretraining.configs import config
from retriever.errors import RetrieverError

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("processes, sequences, message", [
    (1, 2, "use 4"), (1, 4, None), (1, 5, "use 4 or 6"),  # 5 trained steps of 4
    (2, 4, "use 8"),  # 1 passage per process: its span softmax holds only the sibling, the loss is 0
    (2, 6, "use 8"),  # 3 passages do not split over 2 processes
    (2, 8, None), (2, 12, None), (2, 10, "use 8 or 12"), (3, 6, "use 12"), (3, 12, None)])
def test_cocondenser_needs_two_whole_passages_per_process(tmp_path, monkeypatch, processes, sequences, message):
    as_torchrun_process(monkeypatch, processes)
    settings = config(tmp_path / "c.jsonl", tmp_path / "out", "bert", cocondenser=True, batch_size=sequences)
    if message is None:
        settings.check()
        return
    with pytest.raises(RetrieverError, match=re.escape(message)) as refused:
        settings.check()
    assert "\n" not in str(refused.value) and "--sequences-per-step" in str(refused.value)
    rule = f"multiple of {2 * processes} (whole 2-span passages" if processes > 1 else "must be even (2 spans"
    assert rule in str(refused.value) and f"at least {4 * processes} (2+ passages" in str(refused.value)


@pytest.mark.parametrize("layers", [13, 100_000])
def test_a_head_of_more_layers_than_the_bound_is_refused_before_loading(tmp_path, layers):
    """--n-head-layers had no upper bound: 100,000 fresh layers were built for minutes (or until memory ran out)."""
    settings = config(tmp_path / "corpus.jsonl", tmp_path / "out", "no-such-model", n_head_layers=layers)
    with pytest.raises(RetrieverError, match=rf"^--n-head-layers must be a whole number from 1 to 12 \(.*\), not {layers}$"):
        settings.check()
    assert not (tmp_path / "out").exists()
    config(tmp_path / "corpus.jsonl", tmp_path / "out", "no-such-model", n_head_layers=12).check()
