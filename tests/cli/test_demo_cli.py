import pytest
from click.testing import CliRunner

from retriever.cli import main


@pytest.mark.parametrize("output, said", [
    ("-", "'-' is not standard output here: this command writes a folder"), ("", "the name is empty"),
])
def test_demo_into_dash_or_an_empty_name_is_a_usage_error(tmp_path, monkeypatch, output, said):
    """`demo -o -` built the demo index in a folder named '-', and `demo -o "$OUT"` with OUT unset in the working
    folder when it was empty, where encode, index and build refuse both as usage errors."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["demo", "-o", output])
    assert result.exit_code == 2 and f"Invalid value for '--output' / '-o': {said}" in result.output, result.output
    assert list(tmp_path.iterdir()) == []
