"""The names `serve` gives its indexes (``retriever.cli.serving_names``)."""
from pathlib import Path

from retriever.cli.serving_names import name_from_folder


def test_a_positional_folder_with_accented_letters_keeps_them_unaccented():
    """`serve índice` was served as 'ndice': NFKD drops the accents only, so the name stays ASCII for URLs."""
    assert name_from_folder(Path("índice")) == "indice"
    assert name_from_folder(Path("i\u0301ndice_Ärzte")) == "indice_Arzte"  # decomposed as macOS names it
    assert name_from_folder(Path("索引")) == "default"
