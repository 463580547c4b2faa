"""Text flags and arguments that are not Unicode text (bytes that are not UTF-8 in the command line reach Python as
lone surrogates) are usage errors naming the flag, as the command line is parsed."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from retriever.cli import main
from retriever.cli.text_params import PATH_PARAMS, Utf8Text, argument_problem

BYTE_FF = b"\xff".decode("utf-8", "surrogateescape")  # what `retriever search IDX $'\xff'` hands Python

# (arguments with {dir} for an existing folder and {corpus} for an existing file, the flag or argument named)
CASES = [
    ("search {dir} " + BYTE_FF, "'[QUERY]'"),  # exit 1, as if a file were bad
    ("search {dir} ab\ud800", "'[QUERY]'"),
    ("search {dir} --queries {corpus} --tag t" + BYTE_FF, "'--tag'"),  # said to hold whitespace
    ("build {corpus} -o {dir}/out --query-prefix " + BYTE_FF, "'--query-prefix'"),  # a tokenizer traceback
    ("build {corpus} -o {dir}/out --index-type " + BYTE_FF, "'--index-type'"),  # a FAISS traceback
    ("build {corpus} -o {dir}/out --bm25-stemmer " + BYTE_FF, "'--bm25-stemmer'"),  # blamed --bm25-stopwords 'en'
    ("build {corpus} -o {dir}/out --id-field " + BYTE_FF, "'--id-field'"),  # read the corpus first
    ("search {dir} cat --device " + BYTE_FF, "'--device'"),
]


@pytest.mark.parametrize("command, named", CASES, ids=[case[1] + str(n) for n, case in enumerate(CASES)])
def test_text_that_is_not_unicode_is_a_usage_error_naming_the_flag(tmp_path, command, named):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"_id": "a", "text": "x"}\n')
    argv = [part.format(dir=tmp_path, corpus=corpus) for part in command.split(" ")]
    result = CliRunner().invoke(main, argv)
    lines = result.stderr.splitlines()
    assert result.exit_code == 2 and len(lines) == 1, (result.output, result.exception)
    assert lines[0].startswith(f"error: Invalid value for {named}: holds ") and "--help" in lines[0]
    assert not (tmp_path / "out").exists()


def test_an_escaped_byte_is_named_as_the_byte_with_what_to_do():
    assert argument_problem("ab" + BYTE_FF) == ("holds the byte 0xFF at character 3, which is not UTF-8; give it as "
                                                "UTF-8 text (convert it with `iconv -t UTF-8`, or set a UTF-8 locale)")
    assert argument_problem("x\udc00").startswith("holds a lone surrogate U+DC00 at character 2")
    assert argument_problem("café") is None


def test_every_text_parameter_but_paths_is_checked():
    """A text flag added later is checked too; paths may hold any bytes the file system does."""
    for command in main.commands.values():
        for param in command.params:
            if param.name in PATH_PARAMS:
                assert not isinstance(param.type, Utf8Text), (command.name, param.name)
            elif type(param.type).__name__ == "StringParamType":
                raise AssertionError(f"{command.name} {param.name} is not checked")
