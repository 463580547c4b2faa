"""An ivf-ondisk build of 400 random documents, shared by the on-disk index's tests (test_ondisk, test_partwork,
test_part_processes, distributed/test_ray_parts); module-scoped, so each of those files builds its own."""
from __future__ import annotations

import pytest

from fixtures_corpora import write_jsonl
from fixtures_models import WORDS

ONDISK_QUERIES = ["the cat and the dog", "a river of ice", "solar power in the city", "honey from a flower",
                  "the king and the queen", "rain storm cloud", "a rocket to the moon", "bread and coffee"]
ONDISK_PARAMS = dict(index_type="ivf-ondisk", nlist=8, train_size=400, part_size=130, parallel_parts=2,
                     ondisk_codes="flat")


@pytest.fixture(scope="module")
def ondisk_corpus(tmp_path_factory):
    import random

    rng = random.Random(0)
    rows = [{"_id": f"doc{i:04d}", "title": rng.choice(WORDS), "text": " ".join(rng.choices(WORDS, k=12))}
            for i in range(400)]
    return write_jsonl(tmp_path_factory.mktemp("corpus") / "corpus.jsonl", rows)


@pytest.fixture(scope="module")
def ondisk_encoder(tiny_model_dir):
    from retriever.encoder import Encoder, EncoderSettings

    return Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")


@pytest.fixture(scope="module")
def ondisk_shards(ondisk_corpus, ondisk_encoder, tmp_path_factory):
    from retriever.corpus_encoding import encode_corpus

    folder = tmp_path_factory.mktemp("shards") / "one"
    encode_corpus(ondisk_corpus, folder, ondisk_encoder, shard_size=60, progress=False)
    return folder


@pytest.fixture(scope="module")
def ondisk_index(ondisk_shards, ondisk_corpus, tmp_path_factory):
    from retriever.indexing import IndexParams, build_index

    folder = tmp_path_factory.mktemp("built") / "ondisk"
    build_index(ondisk_shards, ondisk_corpus, folder, IndexParams(**ONDISK_PARAMS), progress=False)
    return folder


def ondisk_hits(searcher, nprobe: int) -> list[list[tuple[str, float]]]:
    """Each of ONDISK_QUERIES' top 10 (id, score to 5 places) from ``searcher``."""
    return [[(hit.id, round(hit.score, 5)) for hit in row]
            for row in searcher.search(ONDISK_QUERIES, k=10, nprobe=nprobe)]
