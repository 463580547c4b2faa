"""The training stack's own callbacks."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from retriever.training.callbacks import adopt_save_steps


@pytest.mark.parametrize("steps, said", [(1, "checkpoints every 1 step from now on"),
                                         (5, "checkpoints every 5 steps from now on")])
def test_a_resume_with_another_save_steps_says_the_new_interval_in_agreement(steps, said):
    """A resume changed to --save-steps 1 said "checkpoints every 1 steps"."""
    state, lines = SimpleNamespace(save_steps=500), []
    adopt_save_steps(state, SimpleNamespace(save_steps=steps, save_strategy="steps"), lines.append)
    assert lines == [f"--save-steps changed: {said}"] and state.save_steps == steps
