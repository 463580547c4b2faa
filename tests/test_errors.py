"""Errors a user can act on keep their message wherever they are raised."""
from __future__ import annotations

import pickle

from retriever.errors import InputFileError


def test_an_input_file_error_crosses_process_boundaries_intact():
    error = InputFileError("corpus.jsonl", 3, "missing text field 'text'", "add it")
    copy = pickle.loads(pickle.dumps(error))  # what a process pool or Ray does with a worker's error
    assert type(copy) is InputFileError and str(copy) == str(error) == "corpus.jsonl:3: missing text field 'text'; add it"
    assert (copy.path, copy.line, copy.problem) == ("corpus.jsonl", 3, "missing text field 'text'")
