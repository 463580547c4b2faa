"""A checkpoint's trainer state is checked before a resume trusts it (`retriever/training/checkpoint_state.py`)."""
from __future__ import annotations

import json

import pytest

from retriever.errors import RetrieverError
from retriever.training.checkpoint_state import final_state
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
