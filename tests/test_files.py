import errno
import os
import socket
import stat
import subprocess
import threading

import pytest

from retriever.errors import RetrieverError
from retriever.files import (atomic_write, atomic_write_lines, decoded_lines, read_json, read_json_object,
                             repeated_key, write_json)


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


def test_an_interrupted_write_removes_the_folders_it_made(tmp_path):
    """Ctrl-C while `-o new/sub/out` is written left `new/sub/` behind, empty; a folder that was there stays."""
    (tmp_path / "kept").mkdir()

    def interrupted(tmp):
        tmp.write_text("half")
        raise KeyboardInterrupt

    for target in (tmp_path / "new" / "sub" / "out.txt", tmp_path / "kept" / "sub" / "out.txt"):
        with pytest.raises(KeyboardInterrupt):
            atomic_write(target, interrupted)
    assert sorted(path.name for path in tmp_path.rglob("*")) == ["kept"]


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
    from retriever.output_paths import output_file_problem

    (tmp_path / "folder").mkdir()
    (tmp_path / "afile").write_text("keep")
    assert output_file_problem(tmp_path / "folder") == f"{tmp_path / 'folder'} is a folder; give a file path"
    assert "afile is a file, so" in output_file_problem(tmp_path / "afile" / "sub" / "run.trec")
    assert output_file_problem(tmp_path / "new" / "deeper" / "run.trec") is None
    calls = []
    with pytest.raises(RetrieverError, match="is a folder"):
        atomic_write(tmp_path / "folder", calls.append)
    assert calls == [] and (tmp_path / "afile").read_text() == "keep"


def test_a_full_disk_is_one_line_and_the_old_file_stays(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")

    def fills_the_disk(tmp):
        tmp.write_text("half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(RetrieverError, match=r"^no space left on the device writing .*out\.txt; free some space \(or "
                                             r"choose another path\) and rerun the same command"):
        atomic_write(target, fills_the_disk)
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_an_os_error_in_making_the_lines_is_raised_as_it_came_not_named_a_failed_write(tmp_path):
    """Lines made as they are written (mining's and evaluation's searches): an OSError without a file name raised in
    making them (a disk read of the index) was said to be `cannot write OUTPUT: input/output error`."""
    target = tmp_path / "out.txt"
    target.write_text("old")

    def searched():
        yield "a\n"
        raise OSError(errno.EIO, "Input/output error")

    with pytest.raises(OSError, match=r"Input/output error") as raised:
        atomic_write_lines(target, searched())
    assert type(raised.value) is OSError and raised.value.errno == errno.EIO
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_a_folder_turned_read_only_mid_write_is_one_line_and_the_old_file_stays(tmp_path, monkeypatch):
    """The folder made read-only (or immutable) after the temporary was written: the rename fails and so does removing
    the temporary; the rename's one-line error shows (a PermissionError traceback from the clean-up hid it), and the
    temporary, a dead writer's once this process ends, goes with the next write."""
    target = tmp_path / "out.txt"
    target.write_text("old")

    def refused(*args, **kwargs):
        raise PermissionError(errno.EPERM, "Operation not permitted", str(args[0]))

    monkeypatch.setattr(os, "replace", refused)
    monkeypatch.setattr(os, "unlink", refused)
    with pytest.raises(RetrieverError, match=r"^cannot write .*out\.txt: operation not permitted"):
        atomic_write(target, lambda tmp: tmp.write_text("new"))
    assert target.read_text() == "old"


def test_a_symlink_is_written_through_and_stays_a_link(tmp_path):
    (tmp_path / "real.txt").write_text("old")
    (tmp_path / "link.txt").symlink_to("real.txt")
    write_json(tmp_path / "link.txt", [1])
    assert (tmp_path / "link.txt").is_symlink() and read_json(tmp_path / "real.txt") == [1]


def test_a_symlink_loop_or_a_link_to_nothing_is_refused_in_one_line_naming_it(tmp_path):
    """A loop made `check_outputs_apart` raise `RuntimeError: Symlink loop`, and writing under one said the folder
    'cannot be created (File exists)'."""
    (tmp_path / "loop").symlink_to("loop")
    for path in (tmp_path / "loop", tmp_path / "loop" / "run.trec"):
        with pytest.raises(RetrieverError, match=f"^cannot write {path}: {path} goes through a symbolic link that "
                                                 "leads back to itself"):
            atomic_write_lines(path, ["a\n"])
    (tmp_path / "gone").symlink_to("nowhere")  # mkdir -p under it was a FileExistsError traceback
    with pytest.raises(RetrieverError, match=f"^cannot write .*: {tmp_path / 'gone'} is a symbolic link to nowhere, "
                                             "which does not exist"):
        atomic_write_lines(tmp_path / "gone" / "sub" / "run.trec", ["a\n"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gone", "loop"]


def test_streams_are_written_in_place_not_replaced(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    atomic_write_lines(fifo, ["a\n"])
    reader.join(10)
    read_end, write_end = os.pipe()
    (tmp_path / "stdout").symlink_to(f"/proc/self/fd/{write_end}")  # as /dev/stdout is, on a pipe
    atomic_write_lines(tmp_path / "stdout", ["b\n"])
    os.close(write_end)
    assert received == ["a\n"] and os.read(read_end, 10) == b"b\n"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and (tmp_path / "stdout").is_symlink()


def test_temporaries_of_dead_writers_are_removed_and_live_ones_kept(tmp_path):
    gone = _dead_pid()
    (tmp_path / f".out.txt.tmp-{gone}").write_text("left by a killed write")
    (tmp_path / f".out.txt.tmp-{os.getppid()}").write_text("being written")
    atomic_write_lines(tmp_path / "out.txt", ["x\n"])
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".out.txt.tmp-{os.getppid()}", "out.txt"]


def _dead_pid() -> int:
    finished = subprocess.Popen(["true"])
    finished.wait()
    return finished.pid


def test_repeated_key_names_the_first_key_given_twice_and_how_often():
    assert repeated_key([("a", 1), ("b", 2)]) is None
    assert repeated_key([("a", 1), ("b", 2), ("b", 3), ("a", 4), ("b", 5)]) == ("a", 2)
    assert repeated_key([(str(i), i) for i in range(50_000)] + [("49999", 0)]) == ("49999", 2)


@pytest.mark.parametrize("length", [216, 255])
def test_a_name_too_long_for_its_temporary_says_so(tmp_path, length):
    """A name of 216-255 bytes fits the file system alone but not with the temporary's suffix: atomic_write said
    "nothing can be created in ... (File name too long)", as if the folder were at fault."""
    path = tmp_path / ("a" * length)
    with pytest.raises(RetrieverError) as caught:
        atomic_write_lines(path, ["x\n"])
    assert str(caught.value).startswith(f"{path}: the name is {length} bytes long; the file system takes names of at "
                                        "most 255 bytes, and the names made beside it add up to 40 more, so it may "
                                        "be at most 215; choose a shorter file name"), str(caught.value)
    assert not list(tmp_path.iterdir())
    atomic_write_lines(tmp_path / ("a" * 215), ["x\n"])  # the longest name it takes
    assert (tmp_path / ("a" * 215)).read_text() == "x\n"


def test_a_temporary_names_its_host_and_another_hosts_temporary_is_kept(tmp_path, monkeypatch):
    """Two hosts writing one file on a shared file system (NFS): a temporary named by its pid alone was deleted by a
    write on the other host, whose kernel knows nothing of that pid, so the writer there lost its file. The name
    carries the host, and only this host's dead writers' temporaries go (a name without a host, an earlier
    version's, is taken as this host's)."""
    monkeypatch.setattr(socket, "gethostname", lambda: "node-a")
    gone, old = _dead_pid(), _dead_pid()
    elsewhere = tmp_path / f".out.txt.tmp-{gone}@node-b"
    for path in (elsewhere, tmp_path / f".out.txt.tmp-{gone}@node-a", tmp_path / f".out.txt.tmp-{old}"):
        path.write_text("partly written")
    written = []
    atomic_write(tmp_path / "out.txt", lambda tmp: (written.append(tmp.name), tmp.write_text("x")))
    assert written == [f".out.txt.tmp-{os.getpid()}@node-a"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [elsewhere.name, "out.txt"]


@pytest.mark.parametrize("first, second", [
    ('{"_id": "a", "text": "x"}', '{"_id": "b", "text": "y"}'),  # corpus, queries
    ('{"query_id": "q1", "negatives": ["a"]}', '{"query_id": "q2", "negatives": ["b"]}'),  # train --negatives
    ('{"query": "x", "positives": ["y"]}', '{"query": "z", "positives": ["w"]}'),  # train --train-jsonl
    ('{"qid": "q1", "hits": [{"id": "a", "score": 1}]}', '{"qid": "q2", "hits": []}'),  # JSONL run
    ('{"query_id": "q1", "doc_id": "a", "relevance": 1}', '{"query_id": "q2", "doc_id": "b", "relevance": 1}')])
def test_a_json_line_starting_with_a_byte_order_mark_mid_file_is_named_as_tsv_and_trec_lines_name_it(tmp_path,
                                                                                                    first, second):
    """Two JSONL files joined with cat, the second saved with a BOM: every JSON line reader said `malformed JSON
    (Expecting value at column 1)` or `invalid JSON (Unexpected UTF-8 BOM (decode using utf-8-sig))` of line 2, where
    the TSV and TREC readers name the mark and where it comes from (probe round 20)."""
    from retriever.corpus import iter_documents, iter_queries
    from retriever.runs import read_qrels, read_run
    from retriever.training.data import load_jsonl_examples
    from retriever.training.negatives import read_negatives_file

    path = tmp_path / "joined.jsonl"
    path.write_text(f"\ufeff{first}\n\ufeff{second}\n", encoding="utf-8")
    readers = {"_id": [iter_documents, iter_queries], "negatives": [read_negatives_file],
               "positives": [load_jsonl_examples], "hits": [read_run], "relevance": [read_qrels]}
    read = next(readers[key] for key in readers if f'"{key}"' in first)
    for reader in read:
        with pytest.raises(RetrieverError) as caught:
            list(reader(path))
        assert str(caught.value).startswith(f"{path}:2: the line starts with U+FEFF, a byte-order mark (one starting a "
                                            "line mid-file is where two files were joined; save them without it); or "
                                            "strip every such mark: sed "), reader
        path.write_text(f"{first}\n{second}\n", encoding="utf-8")  # the same lines without the mark are read
        list(reader(path))
        path.write_text(f"\ufeff{first}\n\ufeff{second}\n", encoding="utf-8")
