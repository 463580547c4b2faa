"""`retriever info`: what an index folder holds, and whether its files are intact."""
from __future__ import annotations

import json
from pathlib import Path

import click

from retriever.fusion import FusionParams, fusion_setting
from retriever.wording import counted, shown_number


def _lines(summary: dict) -> list[str]:
    encoder = {key: _text(value) for key, value in summary["encoder"].items()}
    documents = summary["documents"] if shown_number(summary["documents"]) != "?" else "?"
    lines = [f"index:    {summary['path']}",
             f"encoder:  {encoder['model']} ({encoder['pooling']} pooling, normalize={encoder['normalize']}, "
             f"dim {encoder['dim']}, {encoder['dtype']}, max lengths {encoder['query_max_length']}/"
             f"{encoder['passage_max_length']})",
             f"counts:   {counted(summary['vectors'], 'vector')}, {counted(documents, 'passage')}",
             f"type:     {_text(summary['index_type'])} ({_text(summary['factory'])})",
             "search:   " + (", ".join(f"{k}={v}" for k, v in summary["search_defaults"].items() if v is not None)
                            or "no settings")]
    tuning = summary["tuning"]
    if tuning:
        setting = f"{tuning['parameter']}={_text(tuning['value'])}" if tuning["parameter"] else "nothing to tune"
        lines.append(f"tuned:    {setting}, recall@{_text(tuning['k'])} {shown_number(tuning['measured_recall'], '.4f')} "
                     f"on {_text(tuning['queries'])}" + ("" if tuning["reached"] else " (target NOT reached)"))
    lines.extend(_hybrid_lines(summary))
    lines.append(f"size:     {summary['bytes_on_disk'] / 2**20:.1f} MiB on disk")
    lines.append(f"created:  {_text(summary['created'])} by retriever {_text(summary['retriever_version'])}")
    if not summary["integrity_recorded"]:
        lines.append("note:     built before file hashes were recorded; rebuild to get them")
    return lines


def _text(value: object) -> str:
    """A recorded value as text, or '?' where the manifest lacks it or holds an empty name (Python's None was
    shown)."""
    return "?" if value is None or value == "" else str(value)


def _hybrid_lines(summary: dict) -> list[str]:
    """The BM25 part and the recorded fusion, so a tuned hybrid's settings can be seen without reading JSON."""
    from retriever.lexical_opening import terms_text

    bm25, fusion = summary["bm25"], summary["fusion"]
    if not bm25:
        return [f"bm25:     none (add one with `retriever bm25 {summary['path']}`)"]
    lines = [f"bm25:     k1={shown_number(bm25['k1'], 'g')} b={shown_number(bm25['b'], 'g')} ({bm25['method']}), "
             f"stemmer {bm25['stemmer'] or 'none'}, stopwords {bm25['stopwords'] or 'none'}, "
             f"{counted(bm25['documents'], 'document')}, {terms_text(bm25)}"]
    if bm25.get("damage"):
        lines.append(f"bm25:     DAMAGED (--mode bm25/hybrid cannot run): {bm25['damage']}")
    if bm25.get("current_splitting") is False and not bm25.get("damage"):  # the corpus is not read: cheap
        lines.append("bm25:     words split a former way (fullwidth letters, ligatures like ﬁ and ß were not the plain "
                     "letters, combining marks, soft hyphens and İ cut words, or a Chinese, Japanese, Thai, Lao, "
                     "Khmer or Myanmar run was one term): "
                     f"`retriever bm25 {summary['path']} --overwrite` rebuilds it with the current splitting")
    if not fusion:
        return [*lines, f"fusion:   none recorded (hybrid uses {FusionParams().setting()} "
                        "unless --fusion/--rrf-k/--alpha say otherwise)"]
    damage = [f"fusion:   DAMAGED (--mode hybrid cannot run): {fusion['damage']}"] if fusion.get("damage") else []
    return [*lines, _fusion_line(fusion), *damage]


def _fusion_line(fusion: dict) -> str:
    """The recorded fusion in the words `bm25 --tune-fusion-on` says it in (``fusion.fusion_setting``)."""
    line = (f"fusion:   {fusion_setting(fusion['method'], fusion['rrf_k'], fusion['alpha'])}, "
            f"depth {shown_number(fusion['depth'], '')}")
    tuned = fusion["tuned"]
    if tuned:
        queries = tuned["queries"] if shown_number(tuned["queries"]) != "?" else "?"
        line += (f", tuned on {_text(tuned['dataset'])} {_text(tuned['split'])} ({counted(queries, 'query')}, "
                 f"{_text(tuned['metric'])} {shown_number(tuned['score'], '')}; untuned RRF "
                 f"{shown_number(tuned['untuned_rrf'], '')})")
    return line


def echo_summary_json(index: Path) -> None:
    """`info --json`'s object, which `build`, `index` and `bm25 --json` print too: one shape for a folder."""
    from retriever.info import index_summary  # the manifest's readers import torch and FAISS

    click.echo(json.dumps(index_summary(index), indent=2))


@click.command("info")
@click.argument("index", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--verify", is_flag=True,
              help="Also re-hash every file against the SHA-256 the manifest records and re-count FAISS, the id "
                   "map and the doc store (reads the whole folder).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def info_command(index, verify, as_json):
    """Summarise INDEX from its manifest (encoder, counts, index type, tuned settings, BM25 settings, recorded
    fusion, size on disk).

    Opening always checks file presence and sizes; --verify checks full hashes. Damage is one error
    naming the file, but for a damaged BM25 part or fusion record, which the summary names with its fix
    (dense search still works); --verify fails on them.

    Example: retriever info indexes/scifact --verify
    """
    from retriever.info import index_summary, verify_index  # the manifest's readers import torch and FAISS

    summary = index_summary(index)
    if verify:
        summary["verified_files"] = verify_index(index)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    click.echo("\n".join(_lines(summary)))
    if verify:
        click.echo(f"verified: {counted(summary['verified_files'], 'file')} match their SHA-256; counts agree")


COMMANDS = [info_command]
