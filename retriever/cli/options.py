"""Click options shared by several subcommands, so each flag is spelled and documented once."""
from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path

import click
from click.core import ParameterSource

from retriever.choices import DTYPES
from retriever.cli.stdout import refuse_json_to_closed_stdout
from retriever.corpus import FORMATS, Fields, check_output_outside_qrels
from retriever.encoder_settings import OVERRIDABLE, TOWERS, max_length_problem
from retriever.errors import RetrieverError
from retriever.output_paths import check_output_apart, written_in_place
from retriever.model_names import located_model
from retriever.pooling import POOLINGS
from retriever.wording import agree, counted

Decorator = Callable[[Callable], Callable]


class FiniteRange(click.FloatRange):
    """A FloatRange that refuses nan and inf too: nan fails none of its comparisons, and a NaN setting trains a NaN
    model or ranks nothing."""

    def convert(self, value, param, ctx) -> float:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


def check_outputs_apart(outputs: dict[str, Path | None], inputs: dict[str, Path | None]) -> None:
    """Refuse, before any work, an output file that is an input file, an existing file inside an input folder
    (an index, a BEIR folder), another output or a file in a collection's qrels folder: writing it would destroy
    what the command reads, or add a split to a collection."""
    named = [(flag, path) for flag, path in outputs.items() if path is not None and not written_in_place(path)]
    for number, (flag, path) in enumerate(named):
        try:
            check_output_outside_qrels(path, f"the {flag} file")
            same = [other_flag for other_flag, other in named[:number] if other.resolve() == path.resolve()]
            if same:
                raise RetrieverError(f"{flag} and {same[0]} are the same file {path}; give two paths")
            check_output_apart(path, flag, inputs)
        except RetrieverError as error:  # a bad flag
            raise click.UsageError(str(error)) from None


def flags_given(names: tuple[str, ...]) -> list[str]:
    """Which of these parameters the user set on the command line (a default is not a choice)."""
    ctx = click.get_current_context()
    given = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    return [("-" if len(name) == 1 else "--") + name.replace("_", "-") for name in names
            if ctx.get_parameter_source(name) in given]


def compose(*decorators: Decorator) -> Decorator:
    def apply(function: Callable) -> Callable:
        for decorator in reversed(decorators):
            function = decorator(function)
        return function
    return apply


class _RenamedOption(click.Option):
    """An option whose old spellings still parse but are left out of --help (kept for one release)."""

    def __init__(self, *args, old_names: tuple[str, ...] = (), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.old_names = old_names

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        opts = self.opts
        self.opts = [name for name in opts if name not in self.old_names]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = opts


def renamed_option(new: str, *old: str, **kwargs) -> Decorator:
    """``click.option(new)`` that also takes the ``old`` spellings, hidden from --help."""
    name = new.lstrip("-").replace("-", "_")
    return click.option(new, *old, name, cls=_RenamedOption, old_names=old, **kwargs)


def collapsing(names: tuple[str, ...], into: str, make: Callable[..., object]) -> Decorator:
    """A decorator passing ``make(**flags)`` as ``into`` instead of those of the flags ``names`` a command has."""
    def apply(function: Callable) -> Callable:
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            flags = {name: kwargs.pop(name) for name in names if name in kwargs}
            return function(*args, **{into: make(**flags)}, **kwargs)
        return wrapper
    return apply


def _checked_max_length(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """A max length refused as the flags are parsed when it leaves a text no token (``max_length_problem``)."""
    problem = None if value is None else max_length_problem(value)
    if problem is not None:
        raise click.BadParameter(problem, ctx, param)
    return value


def _resolved_model(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A --model that is neither a local folder nor a hub id the hub (or its cache) has, refused as the flags are
    read (`located_model`): before torch loads, and before --ray starts Ray, which it once did first."""
    if value is not None:
        located_model(value)
    return value


def encoder_options(default_model: str | None = "minilm", towers: bool = False) -> Decorator:
    """--model and the flags that shape the encoder (``towers``: --towers too) → ``model`` and
    ``encoder_overrides``, the EncoderSettings fields given; unset ones fall back to the model's retriever.json.
    Each flag is named as its EncoderSettings field, so a new setting needs only its field and its flag here."""
    flags = [
        click.option("--pooling", type=click.Choice(sorted(POOLINGS)), default=None,
                     help="How token states become one vector. [default: the model's retriever.json, else its "
                          "sentence-transformers Pooling module, else mean]"),
        click.option("--normalize/--no-normalize", default=None,
                     help="L2-normalise embeddings (cosine). [default: the model's retriever.json, else whether it has a "
                          "sentence-transformers Normalize module, else on]"),
        click.option("--query-max-length", type=int, default=None, callback=_checked_max_length,
                     help="Max tokens per query; longer ones are cut, and the count is reported. [default: the "
                          "model's retriever.json, else the passage max length]"),
        click.option("--passage-max-length", type=int, default=None, callback=_checked_max_length,
                     help="Max tokens per passage; longer ones are cut, and the count is reported. [default: the "
                          "model's retriever.json, else its sentence-transformers max_seq_length, else its "
                          "tokenizer's limit, at most 512]"),
        click.option("--query-prefix", default=None,
                     help="Text put before every query (e.g. 'query: '). [default: the model's retriever.json, else its "
                          "sentence-transformers query prompt, else none]"),
        click.option("--passage-prefix", default=None,
                     help="Text put before every passage (e.g. 'passage: '). [default: the model's retriever.json, else its "
                          "sentence-transformers document prompt, else none]"),
    ]
    if towers:
        flags.append(click.option("--towers", type=click.Choice(TOWERS), default=None,
                                  help="One encoder for queries and passages, or two untied copies of the init "
                                       "model. [default: the model's retriever.json, else shared]"))
    return compose(
        click.option("--model", default=default_model, show_default=True, callback=_resolved_model,
                     help="Hugging Face model folder or hub id, or 'minilm' for the shipped all-MiniLM-L6-v2."),
        *flags,
        collapsing(OVERRIDABLE, "encoder_overrides", dict),
    )


def device_options() -> Decorator:
    """Where the model runs and in which precision."""
    return compose(
        click.option("--device", default="auto", show_default=True,
                     help="auto (CUDA when present, else CPU), cpu, cuda or cuda:N."),
        click.option("--dtype", type=click.Choice(DTYPES), default="auto", show_default=True,
                     help="Compute precision: auto = fp16 on CUDA, bf16 on CPUs with native bf16 (AVX512-BF16/AMX), "
                          "else fp32."),
    )


def runtime_options() -> Decorator:
    """Where and how fast to run the encoder."""
    return compose(
        device_options(),
        click.option("--batch-size", type=click.IntRange(min=1), default=None,
                     help="Texts per forward pass [default: 16 on the CPU, 128 on CUDA]."),
    )


def corpus_options(titles: bool = True) -> Decorator:
    """How to read a corpus or queries file; a queries reader takes no title, so its --title-field is only
    parsed (to be refused with a reason), not offered in --help."""
    return compose(
        click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True,
                     help="Input format; auto picks by extension (a folder is read as BEIR)."),
        click.option("--id-field", default=Fields.id, show_default=True, help="JSONL key / Parquet column of the id."),
        click.option("--text-field", default=Fields.text, show_default=True,
                     help="JSONL key / Parquet column of the text."),
        click.option("--title-field", default=Fields.title, show_default=True, hidden=not titles,
                     help="JSONL key / Parquet column of the title: read where a record has it; a name other "
                          "than the default must be in some record."),
    )


def fields_from(id_field: str, text_field: str, title_field: str) -> Fields:
    try:
        return Fields(id=id_field, text=text_field, title=title_field)
    except RetrieverError as error:  # two flags naming one key: a usage error
        raise click.UsageError(str(error)) from None


RUN_SUFFIXES = {"trec": (".trec", ".run"), "jsonl": (".jsonl", ".json", ".ndjson")}  # the first: what to name it
_RUN_KINDS = {"trec": ("TREC", "TREC lines"), "jsonl": ("JSONL", "JSONL")}


def check_run_suffix(path: Path | None, fmt: str, flag: str, switch: str | None = None) -> None:
    """Refuse a run file named for the other format (`-o run.jsonl` got TREC lines, exit 0), before any work;
    ``switch`` is the flag that picks the format, where the command has one."""
    other = next((kind for kind, suffixes in RUN_SUFFIXES.items()
                  if kind != fmt and path is not None and path.suffix.lower() in suffixes), None)
    if other is None:
        return
    chosen = f" ({switch} {fmt})" if switch else ""
    fix = f"add {switch} {other}, or " if switch else ""
    raise click.UsageError(f"{flag} {path} names a {_RUN_KINDS[other][0]} file, but the run is written as "
                           f"{_RUN_KINDS[fmt][1]}{chosen}; {fix}name the file for its format "
                           f"({path.with_suffix(RUN_SUFFIXES[fmt][0]).name})")


def json_option(what: str) -> Decorator:
    """--json on the commands that build (``as_json``): standard output holds nothing else, so a script reads one
    object there, and without it nothing, the summary line going to stderr as progress does."""
    return click.option("--json", "as_json", is_flag=True, callback=refuse_json_to_closed_stdout,
                        help=f"Print {what} as one JSON object on standard output (without it nothing is printed "
                             "there; the summary line goes to standard error).")


def report_truncation(encoder=None, passages_cut: int = 0, passages: int = 0,
                      passage_max_length: int | None = None) -> None:
    """Say on stderr how many texts were cut at the max length: a silent cut costs quality unnoticed.
    Queries: what ``encoder`` counted; passages: the count the shards or manifest record."""
    lines = [line for line in getattr(encoder, "truncation_report", list)() if "(--passage-max-length)" not in line]
    if passages_cut:
        were = agree(passages_cut, "was", "were")
        lines.append(f"note: {passages_cut} of {counted(passages, 'passage')} {were} longer than {passage_max_length} "
                     f"tokens and {were} cut (--passage-max-length)")
    for line in lines:
        click.echo(line, err=True)
