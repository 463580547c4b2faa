"""Records read from a BEIR collection's own files, whose keys no flag renames."""
from __future__ import annotations

import json

import pytest

from retriever.corpus import BeirDataset, Fields, count_records, iter_documents
from retriever.errors import InputFileError
from retriever.evaluation import judged_split
from retriever.training.data import load_beir_examples
from retriever.training.dev import load_dev_set


@pytest.mark.parametrize("name", ["queries.jsonl", "corpus.jsonl"])
def test_a_beir_file_keyed_otherwise_says_to_rename_its_keys_not_to_pass_a_flag(tiny_beir, name):
    """evaluate, mine, --tune-fusion-on, train and its dev set said `pass --id-field if the id lives under another key` of a
    collection's queries.jsonl or corpus.jsonl: evaluate and mine have no such flag, and train refuses it without
    --corpus (probe round 16)."""
    path = tiny_beir / name
    path.write_text("".join(json.dumps({"id" if k == "_id" else k: v for k, v in json.loads(line).items()}) + "\n"
                            for line in path.read_text().splitlines()))
    readers = [lambda: load_beir_examples(tiny_beir, "test"), lambda: load_dev_set(tiny_beir, "test")]
    if name == "queries.jsonl":
        readers.append(lambda: judged_split(BeirDataset.open(tiny_beir), "test"))
    for read in readers:
        with pytest.raises(InputFileError) as caught:
            read()
        message = str(caught.value)
        assert message.startswith(f"{path}:1: missing id field '_id' (its keys: id, ")
        assert "--id-field" not in message and "rename" in message and "'_id'" in message, message


@pytest.mark.parametrize("line, expected", [
    ('{"_id": ' + "9" * 5000 + ', "text": "x"}', "a number of 5000 digits"),
    ('{"_id": "a", "text": "x", "extra": ' + "-" + "9" * 4400 + "}", "a number of 4400 digits"),
    ('{"_id": "a", "text": "x", "extra": ' + "[" * 100_000 + "]" * 100_000 + "}", "nests arrays or objects"),
])
def test_a_line_pythons_json_reader_cannot_hold_is_a_file_line_error(tmp_path, line, expected):
    """An integer of over 4,300 digits raised ValueError (Python's guard against slow int conversion, telling the user
    to call sys.set_int_max_str_digits) and arrays nested thousands deep RecursionError: tracebacks from every JSONL
    reader, where any other malformed line is FILE:LINE (probe round 17)."""
    path = tmp_path / "c.jsonl"
    path.write_text('{"_id": "z", "text": "fine"}\n' + line + "\n")
    with pytest.raises(InputFileError) as caught:
        list(iter_documents(path))
    message = str(caught.value)
    assert message.startswith(f"{path}:2: ") and expected in message, message
    assert "set_int_max_str_digits" not in message


@pytest.mark.parametrize("content, problem", [
    ('[{"_id": "a", "text": "x"}, {"_id": "b", "text": "y"}]\n', "one JSON array of 2 records"),
    ('[\n  {"_id": "a", "text": "x"},\n  {"_id": "b", "text": "y"}\n]\n', "one JSON array over several lines"),
    ('[{"_id": "a", "text": "x"},\n {"_id": "b", "text": "y"}]\n', "one JSON array over several lines")])
def test_a_corpus_saved_as_one_json_array_says_how_to_write_it_as_jsonl(tmp_path, content, problem):
    """json.dump(records, f) (indent=2 or not) of a corpus.json: 'line is not a JSON object (it holds an array)' or
    'malformed JSON (Expecting value at column 2)' at line 1, with no word of the JSONL it needs (probe round 17)."""
    path = tmp_path / "corpus.json"
    path.write_text(content)
    with pytest.raises(InputFileError) as caught:
        list(iter_documents(path))
    message = str(caught.value)
    assert message.startswith(f"{path}: the file is {problem}, not JSONL (one object per line)"), message
    assert "json.load(open(sys.argv[1]))" in message
    script = message.split("e.g. ")[1].split(" FILE")[0]
    converted = tmp_path / "corpus.jsonl"
    converted.write_text(subprocess_output(script, path))
    assert [d.id for d in iter_documents(converted)] == ["a", "b"]


def subprocess_output(command: str, path) -> str:
    """What a shell command the message gives prints for FILE ``path``."""
    import shlex
    import subprocess
    import sys

    argv = shlex.split(command)
    argv[0] = sys.executable if argv[0] == "python" else argv[0]
    return subprocess.run([*argv, str(path)], check=True, capture_output=True, text=True).stdout


@pytest.mark.parametrize("content, problem", [
    ('[{"_id": "a", "text": "x"}, {"_id": "b", "text": "y"}]\n', "one JSON array of 2 records"),
    ('[\n  {"_id": "a", "text": "x"}\n]\n', "one JSON array over several lines"),
    ('{\n  "q1": "what",\n  "q2": "who"\n}\n', "one JSON object over several lines"),
    ('{"q1": "what", "q2": "who"}\n', "one JSON object mapping ids to texts")])
@pytest.mark.parametrize("blanks", ["\n\n", "\ufeff \t\n\r\n"])
def test_a_json_file_after_blank_lines_is_named_as_one_starting_on_line_1_is(tmp_path, monkeypatch, content, problem,
                                                                             blanks):
    """A JSON array or object after blank lines was told by line 1 alone: 'FILE:3: line is not a JSON object (it holds
    an array)', 'malformed JSON (Expecting value at column 2)' or 'missing id field', with no word of JSONL; and a
    long array line after them was read whole (leftover of probe round 17). Training files read the same way."""
    from retriever import file_kinds
    from retriever.training.negatives import read_negatives_file

    path = tmp_path / "corpus.json"
    for written in (content, blanks + content):
        path.write_text(written)
        with pytest.raises(InputFileError) as caught:
            list(iter_documents(path))
        assert str(caught.value).startswith(f"{path}: the file is {problem}"), caught.value
        if "array" in problem:
            with pytest.raises(InputFileError, match="the file is one JSON array"):
                read_negatives_file(path)
    monkeypatch.setattr(file_kinds, "FIRST_LINE_BYTES", 100)
    path.write_text(blanks + "[" + ", ".join(['{"_id": "a", "text": "x"}'] * 3000) + "]\n")  # past a read
    assert file_kinds.long_json_array(path) and count_records(path) is None
    path.write_text(blanks + '{"_id": "a", "text": "x"}\n' * 10)
    assert not file_kinds.long_json_array(path) and count_records(path) == 10


def test_a_corpus_that_is_one_long_json_array_line_is_refused_from_its_first_bytes(tmp_path):
    """A multi-gigabyte json.dump on one line was read whole (its bytes, its text, its parsed records) before the
    'one JSON array' message: memory grew with the file. Now a first line past FIRST_LINE_BYTES opening an array of
    objects is named from its first bytes (probe round 17)."""
    import tracemalloc

    path = tmp_path / "corpus.json"
    record = json.dumps({"_id": "a", "title": "t", "text": "words " * 20})
    path.write_text("\ufeff [" + ", ".join([record] * 150_000) + "]\n")  # about 25 MB on one line
    tracemalloc.start()
    try:
        with pytest.raises(InputFileError) as caught:
            list(iter_documents(path))
        assert count_records(path) is None  # a progress bar's count (encode_corpus's, before reading) held it too
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(caught.value).startswith(f"{path}: the file is one JSON array on one line, not JSONL"), caught.value
    assert peak < 4 << 20, peak


def test_a_parquet_table_lacking_the_text_column_names_ten_columns_and_the_one_flag(tmp_path):
    """A wide table (an embedding stored a column per dimension) without 'text' listed every one of its columns in
    the message, hundreds of names on one line, and said --id-field/--text-field of a text column alone."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "wide.parquet"
    pq.write_table(pa.table({"_id": ["a"], **{f"dim{i:04d}": [0.5] for i in range(30)}}), path)
    with pytest.raises(InputFileError) as caught:
        list(iter_documents(path))
    assert str(caught.value) == (f"{path}: missing column 'text' (columns: _id, dim0000, dim0001, dim0002, dim0003, "
                                 "dim0004, dim0005, dim0006, dim0007, dim0008, ...); pass --text-field if the text "
                                 "lives under another column")


@pytest.mark.parametrize("name, fmt", [("corpus.jsonl", "auto"), ("corpus.tsv", "jsonl")])
def test_a_tsv_file_read_as_jsonl_says_how_to_read_it_as_tsv(tmp_path, name, fmt):
    """TSV named .jsonl (or read with --format jsonl) was 'malformed JSON (Expecting value at column 1); each line must
    be one JSON object', with no word of the format flag (probe round 18). A training file, which has no TSV form,
    keeps the JSON hint."""
    from retriever.training.negatives import read_negatives_file

    path = tmp_path / name
    path.write_text("\nid\ttext\na\tx\n", encoding="utf-8")
    with pytest.raises(InputFileError) as caught:
        list(iter_documents(path, fmt=fmt))
    assert str(caught.value) == (f"{path}:2: the line holds tabs and no JSON object, as a TSV line does, and the file "
                                 "is read as JSONL (by its .jsonl or .json name, or --format jsonl); if it is TSV, "
                                 "pass --format tsv or name the file .tsv")
    with pytest.raises(InputFileError, match=r"malformed JSON .*each line must be one JSON object"):
        read_negatives_file(path)


def test_a_text_field_naming_the_title_key_reads_no_title_beside_it(tmp_path):
    """--text-field title on a collection of titles alone read the key as text and again as title: each passage was
    encoded as 'Paris Paris', and each query refused as titled (probe round 18). Both flags naming one key are
    refused, as --id-field naming another field's is."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from retriever.corpus import read_queries
    from retriever.corpus_records import Fields
    from retriever.errors import RetrieverError

    jsonl, parquet = tmp_path / "c.jsonl", tmp_path / "c.parquet"
    jsonl.write_text('{"_id": "a", "title": "Paris"}\n')
    pq.write_table(pa.table({"_id": ["a"], "title": ["Paris"]}), parquet)
    for path in (jsonl, parquet):
        assert [(d.text, d.title) for d in iter_documents(path, fields=Fields(text="title"))] == [("Paris", "")]
        assert [q.text for q in read_queries(path, fields=Fields(text="title"))] == ["Paris"]
    with pytest.raises(RetrieverError, match="--text-field and --title-field both name 'name'"):
        Fields(text="name", title="name")


def test_a_named_title_field_in_none_of_the_first_records_is_refused_there_not_after_the_corpus(tmp_path):
    """`encode --title-field head` over a corpus without it read (and encoded) every record before refusing;
    the reader now stops at record TITLE_WINDOW, and check_first_record reads that far before the model loads."""
    from retriever.corpus import check_first_record
    from retriever.corpus_records import TITLE_WINDOW

    path = tmp_path / "c.jsonl"
    lines = [json.dumps({"_id": str(i), "text": "x"}) for i in range(TITLE_WINDOW + 5)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    read = []
    with pytest.raises(InputFileError, match=rf"c\.jsonl:{TITLE_WINDOW}: no title field 'head' in the first "
                                             rf"{TITLE_WINDOW:,} records.*--title-field"):
        read.extend(iter_documents(path, fields=Fields(title="head")))
    assert len(read) < TITLE_WINDOW
    with pytest.raises(InputFileError, match="no title field 'head'"):
        check_first_record(path, "auto", Fields(title="head"))
    lines[TITLE_WINDOW - 1] = json.dumps({"_id": "late", "text": "x", "head": "H"})  # in the window: read
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert [d.title for d in iter_documents(path, fields=Fields(title="head")) if d.title] == ["H"]
    check_first_record(path, "auto", Fields(title="head"))
    path.write_text('{"_id": "a", "text": "x", "head": "H"}\nnot read before the model loads\n', encoding="utf-8")
    check_first_record(path, "auto", Fields(title="head"))  # stops at the first title: no re-read of the window


def test_a_titled_record_without_text_is_read_as_its_title_as_beirs_loader_keeps_it(tmp_path):
    """`{"_id", "title"}` was refused as `missing text field 'text'`, while BEIR's loader keeps it with an empty
    text; it is read so in JSONL, as a null or empty text already was (and in Parquet and TSV), and is encoded and
    searched as its title. A record with neither a text key nor a title is still refused, naming its line."""
    from retriever.corpus import ReadStats
    from retriever.texts import passage_text

    path = tmp_path / "c.jsonl"
    path.write_text('{"_id": "d1", "title": "Paris"}\n{"_id": "d2", "title": "Rome", "text": null}\n'
                    '{"_id": "d3", "title": "Oslo", "text": "a city"}\n', encoding="utf-8")
    stats = ReadStats()
    documents = list(iter_documents(path, stats=stats))
    assert [(d.id, d.text, d.title) for d in documents] == [("d1", "", "Paris"), ("d2", "", "Rome"),
                                                           ("d3", "a city", "Oslo")]
    assert passage_text(documents[0].title, documents[0].text) == "Paris" and stats.empty_texts == 0
    (tmp_path / "c.tsv").write_text("d1\t\tParis\nd3\ta city\tOslo\n", encoding="utf-8")
    assert [(d.text, d.title) for d in iter_documents(tmp_path / "c.tsv")] == [("", "Paris"), ("a city", "Oslo")]
    for blank in ('{"_id": "d4"}', '{"_id": "d4", "title": " "}', '{"_id": "d4", "title": null}'):
        path.write_text('{"_id": "d3", "title": "Oslo", "text": "a city"}\n' + blank + "\n", encoding="utf-8")
        with pytest.raises(InputFileError, match=r"c\.jsonl:2: missing text field 'text' \(its keys: _id"):
            list(iter_documents(path))


def test_a_corpus_of_titles_without_a_text_key_is_refused_naming_the_flag_before_the_model_loads(tmp_path):
    """Where no record of the first TITLE_WINDOW has the text key, the text lives under another key (a Pyserini
    `contents`) or the file is titles alone: refused there, or at the end of a shorter file, as the text key was on
    the first line."""
    from retriever.corpus import check_first_record
    from retriever.corpus_records import TITLE_WINDOW

    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"_id": str(i), "title": "T", "contents": "x"}) + "\n"
                            for i in range(TITLE_WINDOW + 5)), encoding="utf-8")
    hint = r"\(the first one's keys: _id, contents, title\); pass --text-field .*--text-field title"
    with pytest.raises(InputFileError, match=rf"c\.jsonl:{TITLE_WINDOW}: no text field 'text' in the first "
                                             rf"{TITLE_WINDOW:,} records {hint}"):
        check_first_record(path, "auto", Fields())
    path.write_text('{"_id": "a", "title": "T"}\n{"_id": "b", "title": "U"}\n', encoding="utf-8")
    with pytest.raises(InputFileError, match=r"c\.jsonl: no text field 'text' in any record"):
        check_first_record(path, "auto", Fields())
    assert [d.text for d in iter_documents(path, fields=Fields(text="title"))] == ["T", "U"]
