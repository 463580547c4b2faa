"""The README and docs/ as a new user reads them: their command lines run as written, their advice does not
contradict their examples, and figures quoted from a results file are that file's."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from retriever.cli import main
from retriever.pretraining.trainer import contrastive_start_warning

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def command_lines(text: str) -> list[list[str]]:
    """The words of every `retriever COMMAND ...` line in the ```bash blocks, continuations joined, with
    `$TRAIN`-style variables set in the block expanded."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        variables = dict(re.findall(r'^(\w+)="([^"]*)"$', block, re.M))
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\$(\w+)", lambda m: variables.get(m.group(1), m.group(0)), line.split("#")[0])
            for part in re.split(r"&&|\|", line):
                words = shlex.split(part)
                if "retriever" in words[:-1]:
                    lines.append(words[words.index("retriever") + 1:])
    return lines


def flag_value(words: list[str], flag: str) -> str | None:
    for number, word in enumerate(words):
        if word == flag and number + 1 < len(words):
            return words[number + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_every_command_line_uses_a_command_and_flags_it_has(doc):
    for words in command_lines(doc.read_text(encoding="utf-8")):
        command = main.commands.get(words[0])
        assert command is not None, f"{doc.name}: no command {words[0]!r} in {' '.join(words)}"
        known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
        unknown = [w.split("=")[0] for w in words[1:] if w.startswith("-") and w != "-"
                   and w.split("=")[0] not in known]
        assert not unknown, f"{doc.name}: retriever {words[0]} has no {unknown}: {' '.join(words)}"


def test_the_readme_pretrains_only_from_checkpoints_its_own_advice_allows():
    """The README's pre-training examples started from the default minilm, on which `pretrain` warns (and the
    README's "When pre-training helps" says) that Condenser pre-training lowers fine-tuned quality."""
    default = next(p.default for p in main.commands["pretrain"].params if p.name == "model")
    pretrains = [w for w in command_lines((ROOT / "README.md").read_text(encoding="utf-8")) if w[0] == "pretrain"]
    assert pretrains
    for words in pretrains:
        model = flag_value(words, "--model") or default
        assert contrastive_start_warning(model) is None, f"README: retriever {' '.join(words)}"


def test_scaling_quotes_the_10m_results_file_it_cites():
    """docs/scaling.md cited results/scale_10000000.md but quoted an earlier run's figures (2.05 GB,
    4.20 GB, 5.21 ms) and derived its cores per QPS from them."""
    results = (ROOT / "benchmarks" / "results" / "scale_10000000.md").read_text(encoding="utf-8")
    scaling = (ROOT / "docs" / "scaling.md").read_text(encoding="utf-8")
    build = re.search(r"peak RssAnon of the build's process tree[^*]*\*\*([\d.]+) GB\*\*", results).group(1)
    rss_file = re.search(r"peak RssFile ([\d.]+) GB, VmHWM", results).group(1)
    nprobe, cpu_ms = re.search(r"^\| (\d+) \(tuned\) \|.*\| ([\d.]+) \|$", results, re.M).groups()
    scanned = round(10_000_000 * int(nprobe) / 4096)
    assert f"**{build} GB** at 10,000,000" in scaling
    assert f"/ {rss_file} GB at 10,000,000" in scaling
    nanoseconds = round(float(cpu_ms) * 1e6 / scanned)
    assert f"10M: {float(cpu_ms):.2f} ms per query (batch 64, both cores) ÷ {scanned:,} = **{nanoseconds} ns" in scaling
    assert f"276,800 × {nanoseconds} ns = {round(276_800 * nanoseconds / 1e6)} ms" in scaling
    assert f"100M: {round(276_800 * nanoseconds / 1e6)} cores**" in scaling


def test_the_readme_names_every_route_the_server_has():
    """With several `--index`, only `/docs` told how to search any but the first: the README named no
    `/indexes/NAME/search`."""
    from retriever.serving.app import router

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for path in sorted({route.path for route in router.routes} - {"/"}):
        assert f"`{path.replace('{name}', 'NAME')}" in readme, path


def test_the_readme_states_the_server_limits_that_have_no_flag():
    """Of the limits no flag sets, the queue of requests waiting per index (more got a 503) and the digits of a
    number in a POST body were in no document."""
    from retriever.choices import MAX_WAITING_QUERIES, MAX_WAITING_REQUESTS
    from retriever.serving.json_body import MAX_INT_DIGITS, MAX_JSON_DEPTH
    from retriever.serving.problems import MAX_PROBLEMS
    from retriever.serving.schemas import MAX_K

    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert f"k outside 1..{MAX_K}" in readme
    assert f"naming at most {MAX_PROBLEMS} problems" in readme
    assert f"JSON nesting is capped at {MAX_JSON_DEPTH} levels" in readme
    assert f"a number in a POST body of over {MAX_INT_DIGITS} digits is a 400" in readme
    assert f"at most {MAX_WAITING_REQUESTS:,} requests wait per index (more get a 503" in readme
    assert f"`--max-waiting-queries` ({MAX_WAITING_QUERIES:,} queries waiting per index" in readme


def test_every_test_the_faults_table_names_is_there():
    """docs/faults.md says which test guards each fault; a test moved or renamed must take its row along."""
    text = (ROOT / "docs" / "faults.md").read_text()
    named = set(re.findall(r"(tests/[\w/]+\.py)::(\w+)", text))
    missing = [f"{path}::{name}" for path, name in sorted(named)
               if not (ROOT / path).is_file()
               or not re.search(rf"^(?:def {name}\(|{name} = )", (ROOT / path).read_text(), re.M)]
    assert len(named) > 300 and missing == []


UNITS = {"": 1, "KiB": 1024, "MiB": 1024 ** 2, "s": 1}


def stated_defaults(text: str) -> list[tuple[str, float]]:
    """Each `--flag` (N[ unit]) of the text: the README's way of giving a flag's default."""
    found = re.findall(r"`(--[a-z0-9-]+)` \((\d[\d,.]*)(?: (KiB|MiB|s)\b)?", " ".join(text.split()))
    return [(flag, float(number.rstrip(".,").replace(",", "")) * UNITS[unit]) for flag, number, unit in found]


def test_every_default_the_readme_states_is_the_flags_default():
    """The README gives defaults as `--flag` (N) (`--refine-k-factor` (50), `--max-body-bytes` (256 KiB)); one
    that drifted from its flag's would send a user tuning from the wrong starting point. Flags whose default
    is decided at run time (None here, e.g. --fusion-depth: the manifest's, else 1000) are --help's to state."""
    defaults = {}
    for command in main.commands.values():
        for param in command.params:
            for flag in param.opts:
                if isinstance(param.default, (int, float)) and not isinstance(param.default, bool):
                    defaults.setdefault(flag, set()).add(float(param.default))
    stated = stated_defaults((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(stated) >= 8
    for flag, value in stated:
        assert value in defaults.get(flag, {value}), (flag, value, defaults[flag])


def test_stated_defaults_reads_numbers_with_their_units():
    assert stated_defaults("`--max-body-bytes` (256 KiB), `--per-query` (30)") == [("--max-body-bytes", 262144.0),
                                                                                   ("--per-query", 30.0)]
