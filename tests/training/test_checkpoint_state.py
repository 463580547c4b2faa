"""A checkpoint's states are checked before a resume trusts them (`retriever/training/checkpoint_state.py`)."""
from __future__ import annotations

import json

import pytest

from retriever.errors import RetrieverError
from retriever.training.checkpoint_state import final_state, rng_states_read
from retriever.training.run_record import CHECKPOINTS, RUN_FILE


@pytest.mark.parametrize("state", [{}, [], {"global_step": "4", "max_steps": 8}, {"global_step": 3, "max_steps": 8},
                                   {"global_step": 4, "max_steps": True}, {"global_step": 4, "max_steps": 8, "x": 1}])
def test_a_trainer_state_that_is_not_the_checkpoints_is_refused_in_one_line(tmp_path, state):
    """``{}`` was read as a run finished at step 0: the checkpoint's weights were published as the model, exit 0;
    a list or a string step was a TypeError traceback."""
    folder = tmp_path / CHECKPOINTS
    for step in (2, 4):
        (folder / f"checkpoint-{step}").mkdir(parents=True)
        (folder / f"checkpoint-{step}" / RUN_FILE).write_text("{}")
    newest = folder / "checkpoint-4"
    (newest / "trainer_state.json").write_text(json.dumps(state))
    with pytest.raises(RetrieverError, match=f"trainer_state.json: .*; delete {newest} to resume from checkpoint-2$"):
        final_state(newest)
    (newest / "trainer_state.json").write_text(json.dumps({"global_step": 4, "max_steps": 8}))
    assert final_state(newest) is None
    (newest / "trainer_state.json").write_text(json.dumps({"global_step": 4, "max_steps": 4}))
    assert final_state(newest).global_step == 4


@pytest.mark.parametrize("saved, process, processes, read", [
    (["rng_state.pth"], 0, 1, ("rng_state.pth",)), ([], 0, 1, ("rng_state.pth",)),
    (["rng_state_0.pth", "rng_state_1.pth"], 1, 2, ("rng_state_1.pth",)),
    (["rng_state_0.pth"], 1, 2, ("rng_state_1.pth",)),  # a missing one of this process count's
    (["rng_state_0.pth", "rng_state_1.pth"], 0, 1, ()), (["rng_state.pth"], 1, 2, ())])  # another count's
def test_each_process_reads_its_own_rng_state_unless_another_process_count_saved_them(tmp_path, saved, process,
                                                                                       processes, read):
    """Another count's files are read by no process, and the resume says so in one line (the library said it at info
    level, so a resumed run drew other dropout masks than an uninterrupted one without a word)."""
    for name in saved:
        (tmp_path / name).write_bytes(b"")
    told = []
    assert rng_states_read(str(tmp_path), process, processes, told.append) == read
    if read:
        assert told == []
    else:
        assert len(told) == 1 and told[0].startswith(f"note: {tmp_path.name} was saved by {len(saved)} process(es) "
                                                     f"and this run has {processes}: it continues with the same data "
                                                     "order but other random draws"), told
