"""``OnFirstUse``: made once, by the first ``get``; a failed make is not kept."""
from __future__ import annotations

import pytest

from retriever.first_use import OnFirstUse


def test_a_value_is_made_once_and_a_failed_make_is_tried_again():
    calls = []

    def make():
        calls.append(1)
        if len(calls) == 1:
            raise OSError("the model folder is busy")
        return object()

    slot = OnFirstUse(make)
    assert slot.made is None and calls == []
    with pytest.raises(OSError):
        slot.get()
    assert slot.made is None
    value = slot.get()
    assert slot.get() is value and slot.made is value and len(calls) == 2
