import pytest

from retriever.errors import RetrieverError
from retriever.index_folder import MANIFEST_FILE, read_manifest, replace_manifest


def test_manifest_round_trip_and_errors_name_the_file(tmp_path):
    with pytest.raises(RetrieverError, match="not an index folder"):
        read_manifest(tmp_path)
    replace_manifest(tmp_path, {"format_version": 1})
    assert read_manifest(tmp_path) == {"format_version": 1}
    (tmp_path / MANIFEST_FILE).write_text('{"format_version": ', encoding="utf-8")
    with pytest.raises(RetrieverError, match=r"manifest\.json:1: malformed JSON .*; the index folder is damaged"):
        read_manifest(tmp_path)
