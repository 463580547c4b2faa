"""What one run of ``encode_corpus`` did, and the line that tells the user."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from retriever.wording import counted


@dataclass
class EncodeResult:
    output: Path
    documents: int
    encoded: int
    skipped: int
    shards: int
    empty_texts: int
    seconds: float
    changed_parts: int = 0  # parts re-encoded because their documents changed since the last run
    removed_parts: int = 0  # shards of parts the corpus no longer has
    passages_cut: int = 0  # longer than the encoder's passage_max_length
    earlier_shard_size: int | None = None  # the other --shard-size the folder's shards were cut at
    damaged_parts: int = 0  # shards that failed their record (truncated, rewritten, vectors changed) and were redone


def describe(result: EncodeResult) -> str:
    """One line on what a run encoded, reused and replaced."""
    message = (f"encoded {counted(result.encoded, 'document')} ({result.skipped} already done) into "
               f"{counted(result.shards, 'shard')} in {result.output}, {result.seconds:.1f}s")
    if result.changed_parts:
        message += f"; re-encoded {counted(result.changed_parts, 'part')} " + (
            f"cut at --shard-size {result.earlier_shard_size} before" if result.earlier_shard_size
            else "whose documents changed")
    if result.damaged_parts:
        message += f"; re-encoded {counted(result.damaged_parts, 'damaged shard')}"
    if result.removed_parts:
        message += f"; removed {counted(result.removed_parts, 'shard')} " + (
            "past the last part" if result.earlier_shard_size else "of parts the corpus no longer has")
    if result.empty_texts:
        message += f"; {counted(result.empty_texts, 'document')} had empty text"
    return message
