"""Files of another JSON shape than the reader takes are named, with how to convert them."""
from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

from retriever.corpus import read_queries
from retriever.errors import InputFileError


@pytest.mark.parametrize("text", ['{"q1": "what is honey", "q2": "lava rock"}\n',
                                  '{\n  "q1": "what is honey",\n  "q2": "lava rock"\n}\n',
                                  '{"q1": "what is honey",\n "q2": "lava rock"}\n'])
def test_a_queries_file_of_one_json_object_of_id_to_text_is_named_with_how_to_convert_it(tmp_path, text):
    """BEIR's {query id: text} dict saved with json.dump was told to pass --id-field (on one line) or was malformed
    JSON at column 2 (indented) or at the comma ending its first line: neither said what the file is. The command the message gives converts it."""
    path = tmp_path / "queries.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputFileError) as caught:
        read_queries(path)
    line = str(caught.value)
    assert "\n" not in line and "ids to texts ({id: text, ...}" in line and "--id-field" not in line, line
    command = line[line.index("python -c"):line.index(" > queries.jsonl")].replace("FILE", str(path))
    converted = subprocess.run(shlex.split(command.replace("python", sys.executable, 1)), capture_output=True,
                               text=True, check=True).stdout
    (tmp_path / "queries.jsonl").write_text(converted, encoding="utf-8")
    assert [(q.id, q.text) for q in read_queries(tmp_path / "queries.jsonl")] == [("q1", "what is honey"),
                                                                                 ("q2", "lava rock")]


def test_a_corpus_of_one_json_object_of_id_to_record_is_named_with_how_to_convert_it(tmp_path):
    """BEIR's corpus dict ({doc id: {"title", "text"}}, as its loader keeps a corpus) saved with json.dump was told
    "missing id field '_id' (its keys: d1, d2); pass --id-field", which no value of the flag could meet."""
    from retriever.corpus import iter_documents

    path = tmp_path / "corpus.json"
    path.write_text('{"d1": {"title": "Bees", "text": "make honey"}, "d2": {"text": "lava rock"}}\n', encoding="utf-8")
    with pytest.raises(InputFileError) as caught:
        list(iter_documents(path))
    line = str(caught.value)
    assert "ids to records ({id: {\"title\": ..., \"text\": ...}, ...}" in line and "--id-field" not in line, line
    command = line[line.index("python -c"):line.index(" > corpus.jsonl")].replace("FILE", str(path))
    converted = subprocess.run(shlex.split(command.replace("python", sys.executable, 1)), capture_output=True,
                               text=True, check=True).stdout
    (tmp_path / "corpus.jsonl").write_text(converted, encoding="utf-8")
    assert [(d.id, d.title, d.text) for d in iter_documents(tmp_path / "corpus.jsonl")] == [
        ("d1", "Bees", "make honey"), ("d2", "", "lava rock")]
