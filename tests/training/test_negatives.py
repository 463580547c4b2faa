"""Reading a hard negatives file (``--negatives``)."""
from __future__ import annotations

import pytest

from retriever.errors import InputFileError


def test_an_indented_training_or_negatives_file_is_not_told_to_become_a_queries_file(tmp_path):
    """--negatives or --train-jsonl saved as one indented JSON object was told 'if it maps ids to texts, write one
    {"_id": ..., "text": ...} object per line ... > queries.jsonl', a corpus reader's conversion that makes no training
    file (probe round 18)."""
    from retriever.training.data import load_jsonl_examples
    from retriever.training.negatives import read_negatives_file

    path = tmp_path / "negatives.json"
    path.write_text('{\n  "q1": ["d1", "d2"]\n}\n')
    for read in (read_negatives_file, load_jsonl_examples):
        with pytest.raises(InputFileError) as caught:
            read(path)
        assert str(caught.value) == (f"{path}: the file is one JSON object over several lines, not JSONL (one object "
                                     "per line); write each record as one JSON object on a line of its own")
