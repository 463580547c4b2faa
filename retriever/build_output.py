"""The output folder of a build: refused up front (before any encoding) when it cannot be made or is not ours to
replace, and the finished folder moved into place at the end, with the parts a crash left beside it cleared."""
from __future__ import annotations

import re
import sys
from pathlib import Path

from retriever.errors import RetrieverError
from retriever.files import read_json
from retriever.folders import check_creatable, named_output, replace_folder, replaceable
from retriever.index_folder import MANIFEST_FILE
from retriever.integrity import recorded_files
from retriever.lexical import LEXICAL_DIR
from retriever.partwork import clear_finished, owned_inputs, parts_folder, unfinished_note
from retriever.pid_names import WRITER
from retriever.shard_completeness import check_complete
from retriever.shards import list_shards


def shards_folder(output: Path) -> Path:
    """Where `build -o OUTPUT` keeps the shards it encodes, beside the index (as ``partwork.parts_folder``)."""
    return output.with_name(output.name + ".shards")


def check_output(output: Path, overwrite: bool, ondisk: bool = False) -> Path:
    """The index folder to make, refused up front (before any encoding) when it cannot be made or when what is
    there is not ours to replace: --overwrite replaces an index folder or an empty one, never a user's files;
    an ``ondisk`` build's OUTPUT.parts must be a build's. First, parts a crash left beside a finished index go."""
    output = named_output(output)
    cleared = clear_finished(parts_folder(output), output / MANIFEST_FILE)
    if cleared:
        print(cleared, file=sys.stderr)
    _refuse_unreplaceable(output, overwrite)
    for beside in (shards_folder(output), parts_folder(output)):
        if beside.exists() and not beside.is_dir():
            raise RetrieverError(f"{beside}: is a file where the build keeps its {beside.suffix[1:]} folder; "
                                 "remove it or choose another --output")
    if ondisk:
        refuse_index_beside(output, parts_folder(output), "parts")
        owned_inputs(parts_folder(output))
    elif note := unfinished_note(parts_folder(output), output):
        print(note, file=sys.stderr)
    check_creatable(output)
    return output


def refuse_index_beside(output: Path, beside: Path, what: str) -> None:
    """Refuse a build of ``output`` whose OUTPUT.shards or OUTPUT.parts (``beside``) is an index folder (one built
    with `-o NAME.shards`): encode said to encode into NAME.shards.shards, which `build` has no flag for."""
    if (beside / MANIFEST_FILE).is_file():
        raise RetrieverError(f"{beside}: is an index folder, where the build of {output} keeps its {what}; choose "
                             "another --output, or move that index away")


def shards_to_index(shards: Path) -> tuple[list[Path], dict]:
    """``check_complete``'s shards and encoder record, after refusing an index folder given as the shards: it said
    to run `retriever encode`, where the shards the index was built from are usually kept beside it."""
    if (shards / MANIFEST_FILE).is_file():
        named = shards.resolve() if shards.name in ("", "..") else shards
        beside = shards_folder(named)
        lacks = f"{shards}: an index folder, not a folder of embedding shards"
        if beside.is_dir() and list_shards(beside):
            raise RetrieverError(f"{lacks}; index the shards it was built from, which `build` kept beside it: "
                                 f"`retriever index {beside} --corpus CORPUS --output INDEX`")
        raise RetrieverError(f"{lacks}, and no shards of it are kept beside it ({beside}); give `retriever index` the "
                             "folder `retriever encode` wrote, or encode its corpus again with `retriever build "
                             "CORPUS --output INDEX`")
    return check_complete(shards)


def refuse_inputs_inside(output: Path, inputs: dict[str, str | Path | None]) -> None:
    """Refuse to replace an ``output`` holding an input of the build (``inputs``: what each is, and its path): the old
    folder is deleted whole once the new one is in place, and with it the corpus, shards or model the new index
    records (a corpus copied into its index folder was deleted by `build --overwrite`, exit 0); then any other file the
    manifest does not record (``_refuse_files_not_its_own``)."""
    if not output.is_dir():
        return
    within = output.resolve()
    for what, path in inputs.items():
        if path is not None and Path(path).exists() and Path(path).resolve().is_relative_to(within):
            raise RetrieverError(f"{output}: holds {what} this build reads ({path}), which replacing the folder "
                                 f"would delete; move it out of {output} first, or choose another --output")
    _refuse_files_not_its_own(output)


def _refuse_unreplaceable(output: Path, overwrite: bool) -> None:
    if not (output.exists() or output.is_symlink()):
        return
    if not replaceable(output, MANIFEST_FILE):
        what = "a folder without manifest.json" if output.is_dir() and not output.is_symlink() else "a file or link"
        raise RetrieverError(f"{output}: exists and is not an index folder ({what}); --overwrite replaces only "
                             "index folders: remove it or choose another --output")
    if not overwrite:
        raise RetrieverError(f"{output}: already exists; pass --overwrite to replace it or choose another --output")


# what killed writers leave in an index folder: hidden temporaries (``.index.faiss.tmp-PID``, ``.bm25.building-PID``)
# and BM25 parts a `bm25 --overwrite` built but did not record (``bm25-1a2b3c4d``)
_LEFT_BY_WRITERS = re.compile(rf"\..+\.(?:tmp|building)-{WRITER}|{LEXICAL_DIR}-[0-9a-f]{{8}}")


def _refuse_files_not_its_own(output: Path) -> None:
    """Refuse to replace an index folder holding what its manifest does not record (a run `search -o IDX/run.trec`
    wrote, a user's notes): the folder is replaced whole, and they were deleted without a word. Hidden temporaries
    and parts of killed writers go with it; a manifest that records no files (damaged, or older) is not judged."""
    try:
        recorded = {name.split("/")[0] for name in recorded_files(read_json(output / MANIFEST_FILE))}
    except (RetrieverError, AttributeError, TypeError):
        return
    foreign = sorted(entry.name for entry in output.iterdir()
                     if entry.name not in recorded | {MANIFEST_FILE} and not _LEFT_BY_WRITERS.fullmatch(entry.name))
    if recorded and foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise RetrieverError(f"{output}: holds {shown}, which the index does not record and replacing the folder "
                             f"would delete; move {'them' if len(foreign) > 1 else 'it'} out of {output} first, or "
                             "choose another --output")


def move_into_place(building: Path, output: Path, overwrite: bool) -> None:
    """Put the finished ``building`` at ``output``, unless what is there changed into something not ours meanwhile."""
    if (output.exists() or output.is_symlink()) and not (overwrite and replaceable(output, MANIFEST_FILE)):
        raise RetrieverError(f"{output}: appeared or changed while building; not replaced: remove it or choose "
                             "another --output, then rerun (the shards are kept)")
    replace_folder(building, output)
