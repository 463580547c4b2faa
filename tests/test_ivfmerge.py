"""The merge of an ivf-ondisk build's parts into index.ivfdata, and FAISS's notes kept off stdout meanwhile."""
from __future__ import annotations

import os
import shutil

import pytest

from retriever.errors import RetrieverError
from retriever.ivfmerge import faiss_notes_silenced, merged_lists


@pytest.mark.parametrize("needed, free, said", [(150_000, 100_000, "147 KiB are needed for index.ivfdata and 97 KiB"),
                                                (3 * 2**30, 2**30 + 2**29, "3.0 GiB are needed for index.ivfdata and "
                                                                           "1.5 GiB")])
def test_the_space_a_merge_lacks_is_said_in_units_that_tell_the_two_apart(tmp_path, needed, free, said):
    """Both sizes were MiB with one decimal: a small build read "0.1 MiB are needed ... and 0.1 MiB are free"; the
    message named the hidden building folder, not the folder whose file system is full."""
    import retriever.ivfmerge as ivfmerge

    building = tmp_path / ".idx.building-7"
    building.mkdir()
    usage = shutil._ntuple_diskusage(10**12, 10**12 - free, free)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ivfmerge.shutil, "disk_usage", lambda _: usage)
        with pytest.raises(RetrieverError) as caught:
            ivfmerge.check_space(building / "index.ivfdata", needed)
    assert str(caught.value).startswith(f"{tmp_path}: {said} are free on its file system; free some space")


def test_faiss_progress_lines_reach_the_bar_and_not_stdout(capfd):
    heard: list[str] = []
    with faiss_notes_silenced(heard.append):
        os.write(1, b"merged 3 lists in 0.501 s\rmerged 7 lists in 1.002 s\r\n")
    assert merged_lists("".join(heard), 0) == 7 and merged_lists("resizing x to 10 bytes", 2) == 2
    assert capfd.readouterr().out == ""
