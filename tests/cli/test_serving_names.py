"""The names `serve` gives its indexes (``retriever.cli.serving_names``)."""
from pathlib import Path

from retriever.cli.serving_names import name_from_folder


def test_a_positional_folder_with_accented_letters_keeps_them_unaccented():
    """`serve índice` was served as 'ndice': NFKD drops the accents only, so the name stays ASCII for URLs."""
    assert name_from_folder(Path("índice")) == "indice"
    assert name_from_folder(Path("i\u0301ndice_Ärzte")) == "indice_Arzte"  # decomposed as macOS names it
    assert name_from_folder(Path("a.b")) == "a-b"


def test_a_positional_folder_named_in_another_script_keeps_its_letters(tmp_path):
    """`serve 索引` and `serve индекс` were served as 'default' (every letter dropped, being no ASCII one), so two
    such folders clashed and the URL named neither; a name given to --index in such letters was refused."""
    from retriever.cli.serving_names import parse_named_indexes

    assert name_from_folder(Path("索引")) == "索引"
    assert name_from_folder(Path("мои\u0306 индекс")) == "мой-индекс"  # й decomposed, as macOS names it
    assert name_from_folder(Path("Ärzte_नमस्ते")) == "Arzte_नमस्ते"  # Devanagari's vowel signs are marks
    assert name_from_folder(Path("ｶﾀﾛｸﾞ")) == "カタログ"  # half-width kana as they are usually written
    assert name_from_folder(Path("!!!")) == "default"
    for name in ("索引", "индекс"):
        (tmp_path / name).mkdir()
    folders = parse_named_indexes(tmp_path / "索引", ("мои\u0306=" + str(tmp_path / "индекс"),))
    assert list(folders) == ["索引", "мой"]


def test_a_positional_link_is_served_under_the_name_typed(tmp_path, monkeypatch):
    """`serve mylink` (mylink -> indexes/abc123) was served as 'abc123', a name the user never typed: the link's own
    name is taken (`.` and `..` still name the folder they lead to)."""
    target = tmp_path / "indexes" / "abc123"
    target.mkdir(parents=True)
    (tmp_path / "mylink").symlink_to(target)
    monkeypatch.chdir(tmp_path)
    assert name_from_folder(Path("mylink")) == "mylink"
    assert name_from_folder(Path("mylink/")) == "mylink"
    monkeypatch.chdir(target)
    assert name_from_folder(Path(".")) == "abc123"
    assert name_from_folder(Path("../abc123/.")) == "abc123"


def test_a_name_taken_by_the_positional_index_names_it_as_typed(tmp_path, monkeypatch):
    """`serve . --index ab=../cd` (run in ab) said "INDEX  is served as 'ab'": the name of `.` is empty."""
    import click
    import pytest

    from retriever.cli.serving_names import parse_named_indexes

    for name in ("ab", "cd"):
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path / "ab")
    with pytest.raises(click.BadParameter, match=r"INDEX \. is served as 'ab'"):
        parse_named_indexes(Path("."), ("ab=../cd",))
