import pytest

from retriever.errors import RetrieverError
from retriever.files import atomic_write, atomic_write_lines, decoded_lines, read_json, read_json_object, write_json


def test_failed_write_leaves_neither_file_nor_temporary(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")

    def fail(tmp):
        tmp.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError):
        atomic_write(target, fail)
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_lines_and_json_round_trip(tmp_path):
    atomic_write_lines(tmp_path / "sub" / "lines.txt", (f"{i}\n" for i in range(3)))
    assert list(decoded_lines(tmp_path / "sub" / "lines.txt")) == [(1, "0"), (2, "1"), (3, "2")]
    write_json(tmp_path / "a.json", {"x": [1, 2]})
    assert read_json(tmp_path / "a.json") == {"x": [1, 2]}
    assert (tmp_path / "a.json").read_text().endswith("\n")


@pytest.mark.parametrize("content, expected", [
    ('{"a": 1,\n"b": }', r"bad\.json:2: malformed JSON \(.*\); fix it"),
    ("[1]", r"bad\.json: not a JSON object \(it holds a list\); fix it"),
    (b"\xff{}", r"bad\.json: unreadable .*; fix it"),
])
def test_bad_json_is_one_line_with_place_and_hint(tmp_path, content, expected):
    path = tmp_path / "bad.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(RetrieverError, match=expected) as error:
        read_json_object(path, "fix it")
    assert "\n" not in str(error.value)


def test_missing_json_is_an_error_unless_a_default_is_given(tmp_path):
    with pytest.raises(RetrieverError, match="missing.json: file not found"):
        read_json(tmp_path / "missing.json")
    assert read_json_object(tmp_path / "missing.json", missing={}) == {}


def test_a_path_that_could_never_be_written_is_refused_before_any_work(tmp_path):
    from retriever.errors import RetrieverError
    from retriever.files import output_file_problem

    (tmp_path / "folder").mkdir()
    (tmp_path / "afile").write_text("keep")
    assert output_file_problem(tmp_path / "folder") == f"{tmp_path / 'folder'} is a folder; give a file path"
    assert "afile is a file, so" in output_file_problem(tmp_path / "afile" / "sub" / "run.trec")
    assert output_file_problem(tmp_path / "new" / "deeper" / "run.trec") is None
    calls = []
    with pytest.raises(RetrieverError, match="is a folder"):
        atomic_write(tmp_path / "folder", calls.append)
    assert calls == [] and (tmp_path / "afile").read_text() == "keep"
