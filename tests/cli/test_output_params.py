import click
import pytest

from retriever.cli.output_params import OutputFile


@pytest.mark.parametrize("name", ["r\nx.trec", "run\x1b[2J.trec", "a\rb.jsonl"])
def test_an_output_file_name_holding_a_control_character_is_refused_in_one_line(tmp_path, name):
    """`search -o $'r\\nx.trec'` wrote the run and said `wrote 1 query … to r<newline>x.trec` on two lines, as
    output folders did before they were refused (folders.check_output_name)."""
    with pytest.raises(click.BadParameter, match="holds a control character") as refused:
        OutputFile().convert(str(tmp_path / name), None, None)
    assert not any(ord(character) < 32 or 127 <= ord(character) < 160 for character in str(refused.value))
    assert list(tmp_path.iterdir()) == []
