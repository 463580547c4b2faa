"""What an input file really is, when it is not UTF-8 text (compressed, or text in UTF-16 or UTF-32), or not JSONL
but one long JSON array.

Every text reader decodes UTF-8 only; read as UTF-8 such a file is "invalid UTF-8 at byte 0" (or, for UTF-16
without a byte-order mark, NULs between the characters), which hides the cause. One check of the first bytes,
used by the line reader (``files.decoded_lines``), the JSON reader and the corpus format detection, names it and
the command that makes the file readable.
"""
from __future__ import annotations

import glob
import re
from pathlib import Path

from retriever.errors import InputFileError

# The first bytes of compressed files (patterns), with the command that undoes each. bzip2's is taken with its
# block or end marker: "BZh" alone starts text too (a TSV whose first id is BZh1).
_COMPRESSED = ((rb"\x1f\x8b", "gzip", "gunzip -k"), (rb"BZh[1-9](1AY&SY|\x17rE8P\x90)", "bzip2", "bunzip2 -k"),
               (rb"\xfd7zXZ\x00", "xz", "unxz -k"), (rb"\x28\xb5\x2f\xfd", "zstd", "unzstd"),
               (rb"PK\x03\x04", "zip", "unzip"))

# Byte-order marks, UTF-32 first (its little-endian mark starts with UTF-16's), and the iconv name of each.
_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"),
         (b"\xfe\xff", "UTF-16"))

# Without a mark: where the NULs fall (byte offsets modulo 4) in ASCII text of each encoding.
_NUL_PLACES = (({1, 2, 3}, "UTF-32LE"), ({0, 1, 2}, "UTF-32BE"), ({1, 3}, "UTF-16LE"), ({0, 2}, "UTF-16BE"))

HEAD_BYTES = 64  # how much of a file's start the check looks at
# A Parquet file's first bytes: its magic, then the first page header (a Thrift field header, a control byte); a TSV
# whose first id starts "PAR1" is text.
PARQUET_START = re.compile(rb"PAR1[\x00-\x08\x0e-\x1f]")


def unmarked_encoding(head: bytes) -> str | None:
    """UTF-16 or UTF-32 (with its byte order) of a start without a byte-order mark, told by where its NULs fall:
    UTF-8 text holds no NUL, so a start of at least a quarter NULs, all at the places of one encoding's ASCII
    characters, is that encoding. Text opening with non-ASCII characters is not told (it reads as invalid UTF-8)."""
    head = head[:HEAD_BYTES]
    if len(head) < 4 or 4 * head.count(0) < len(head):
        return None
    places = {offset % 4 for offset, byte in enumerate(head) if byte == 0}
    return next((name for pattern, name in _NUL_PLACES
                 if places == pattern or (name.startswith("UTF-16") and places <= pattern)), None)


def _compression(head: bytes) -> tuple[str, str] | None:
    """(kind, command that undoes it) of a compressed file's first bytes, else None."""
    return next(((kind, command) for magic, kind, command in _COMPRESSED if re.match(magic, head)), None)


def compressed_copy(folder: Path, name: str) -> InputFileError | None:
    """The error for a folder holding ``name`` only compressed (``corpus.jsonl.gz``, as BEIR collections are shared
    on the Hugging Face hub), which was called missing without a word of the copy; None when it holds none."""
    for found in sorted(folder.glob(glob.escape(name) + ".*")):
        try:
            with open(found, "rb") as handle:
                packed = _compression(handle.read(HEAD_BYTES))
        except OSError:
            continue
        if packed is not None:
            return InputFileError(folder, None, f"holds {found.name}, {packed[0]}-compressed, not {name}",
                                  f"decompress it ({packed[1]} {found}) so {name} is there")
    return None


def kind_error(path: Path, head: bytes) -> InputFileError | None:
    """An error naming what a file whose first bytes are ``head`` is, when the readers cannot read it as UTF-8
    text (compressed, UTF-16, UTF-32, Parquet), with the command that converts it; None for anything else."""
    if PARQUET_START.match(head):  # piped to `--queries -` without --format, or named .jsonl
        return InputFileError(path, None, "the file is Parquet, not JSONL or TSV text",
                              "pass --format parquet (or give it a .parquet name)")
    packed = _compression(head)
    if packed is not None:
        kind, command = packed
        return InputFileError(path, None, f"the file is {kind}-compressed, which this reader does not unpack",
                              f"decompress it first ({command} {path.name}) and pass the file it gives")
    marked = next((name for mark, name in _BOMS if head.startswith(mark)), None)
    encoding = marked or unmarked_encoding(head)
    if encoding is None:
        return None
    how = (f"it starts with a {marked} byte-order mark" if marked
           else f"no byte-order mark, but its NUL bytes fall as in {encoding} text")
    converted = Path(path.name).with_stem(f"{path.stem}-utf8")
    return InputFileError(path, None, f"the file is {encoding[:6]} text ({how}), not UTF-8",
                          f"save it as UTF-8 (e.g. iconv -f {encoding} -t UTF-8 {path.name} > {converted})")


def file_kind_error(path: Path) -> InputFileError | None:
    """``kind_error`` of a regular file's first bytes. Only a regular file is looked at: the first bytes of a
    pipe would be lost to the reader."""
    if not path.is_file():
        return None
    try:
        with open(path, "rb") as handle:
            head = handle.read(HEAD_BYTES)
    except OSError:
        return None  # the reader says what is wrong with it
    return kind_error(path, head)


# A first line longer than this that opens a JSON array of objects is named from its first bytes (``long_json_array``);
# a shorter one is parsed, and its records counted in the message.
FIRST_LINE_BYTES = 1 << 20
_ARRAY_OF_OBJECTS = re.compile(rb"(\xef\xbb\xbf)?\s*(?P<array>\[)[ \t\r\f\v]*\{")


def long_json_array(path: Path) -> bool:
    """Whether a regular file is one JSON array of objects on a first non-blank line past ``FIRST_LINE_BYTES`` (a
    multi-gigabyte ``json.dump``, blank lines before it or not): the line reader would hold the whole line, its text
    and its records before refusing it."""
    if not path.is_file():
        return False
    try:
        with open(path, "rb") as handle:
            opening = _ARRAY_OF_OBJECTS.match(handle.read(HEAD_BYTES))
            if not opening:
                return False
            handle.seek(opening.start("array"))
            while handle.tell() - opening.start("array") <= FIRST_LINE_BYTES:
                block = handle.read(1 << 16)
                if not block or b"\n" in block:
                    return False
    except OSError:
        return False  # the reader says what is wrong with it
    return True
