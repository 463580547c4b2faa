"""Shared fixtures: a tiny random BERT (seconds to load and run) and a tiny corpus."""
from __future__ import annotations

import os

# Before huggingface_hub is imported (it reads this once): no test may reach the network, and a hub id
# that cannot be resolved must fail at once instead of after minutes of retries.
os.environ["HF_HUB_OFFLINE"] = "1"

import json  # noqa: E402
import shutil
import socket
import string
import threading
from pathlib import Path

import pytest
import torch
from transformers import BertConfig, BertModel, BertTokenizerFast

SHARED_DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"

WORDS = ("the a of and to in is was on for with by as at from that it this are be or an which have has "
         "cat dog bird fish tree river mountain city music game ball team coffee tea bread water fire "
         "sun moon star planet space rocket train car road bridge book paper ink press bee honey flower "
         "volcano lava ice glacier snow ocean tide wave whale octopus heart blood brain cell plant leaf "
         "light energy solar power wind rain cloud storm earth quake rock stone king queen castle war "
         "what where when how why who does do can many much large small hot cold old new first last").split()


def build_vocab() -> list[str]:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    pieces = list(string.ascii_lowercase) + list(string.digits) + list(string.punctuation)
    continuations = ["##" + c for c in string.ascii_lowercase + string.digits]
    return specials + sorted(set(WORDS) - set(pieces)) + pieces + continuations


def make_tiny_bert(folder: Path, layers: int = 4, seed: int = 0, with_pooler: bool = True) -> Path:
    """Save a random BERT with a WordPiece tokenizer that covers any ASCII text."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab = build_vocab()
    tokenizer = BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab)}, do_lower_case=True)
    tokenizer.save_pretrained(folder)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=layers, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512)
    BertModel(config, add_pooling_layer=with_pooler).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


TINY_DOCS = [
    ("d1", "Cats", "the cat sat on the old mat by the fire"),
    ("d2", "Dogs", "a dog ran to the river with a ball"),
    ("d3", "Coffee", "coffee and tea are hot drinks from a plant leaf"),
    ("d4", "Volcano", "lava from the volcano is hot rock"),
    ("d5", "Glacier", "a glacier is a river of ice and snow"),
    ("d6", "Bees", "the bee makes honey from a flower"),
    ("d7", "Space", "a rocket flew to the moon and a planet"),
    ("d8", "Whales", "the whale and the octopus live in the ocean"),
    ("d9", "Trains", "the train crossed a bridge near the city"),
    ("d10", "Heart", "the heart moves blood to the brain"),
    ("d11", "Solar", "solar power turns sun light into energy"),
    ("d12", "Storms", "wind rain and cloud make a storm"),
]


def run_in_threads(target, argument_tuples, timeout: float | None = None) -> None:
    """Start one thread per argument tuple, all before any is joined, so they run at the same time."""
    threads = [threading.Thread(target=target, args=arguments) for arguments in argument_tuples]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)


def sentence_transformers_modules():
    """sentence-transformers' module classes (Transformer, Pooling, Router, ...): 6.x moved them and warns on the old
    path, which 5.x (the test extra's floor) alone has."""
    try:
        from sentence_transformers.sentence_transformer import modules
    except ImportError:
        from sentence_transformers import models as modules
    return modules


def free_port() -> int:
    """A local TCP port nothing listens on once this returns (a server's, or one that must refuse connections)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def as_torchrun_process(monkeypatch, processes: int) -> None:
    """The environment torchrun gives the first of ``processes`` processes (no group is joined here)."""
    for name, value in {"WORLD_SIZE": str(processes), "RANK": "0", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(name, value)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture()
def tiny_beir(tmp_path) -> Path:
    """A BEIR folder of 12 documents and 4 judged queries."""
    return write_tiny_beir(tmp_path / "tiny-beir")


def write_tiny_beir(root: Path) -> Path:
    """tiny_beir's folder at ``root``, for a fixture shared by a module's tests."""
    (root / "qrels").mkdir(parents=True)
    write_jsonl(root / "corpus.jsonl", [{"_id": i, "title": t, "text": x} for i, t, x in TINY_DOCS])
    write_jsonl(root / "queries.jsonl", [
        {"_id": "q1", "text": "where does honey come from", "metadata": {"answers": ["flower"]}},
        {"_id": "q2", "text": "hot lava rock", "metadata": {"answers": ["volcano"]}},
        {"_id": "q3", "text": "what does the heart do", "metadata": {"answers": ["blood"]}},
        {"_id": "q4", "text": "ice and snow", "metadata": {"answers": ["glacier"]}},
    ])
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td6\t1\nq2\td4\t1\nq3\td10\t1\nq4\td5\t1\n", encoding="utf-8")
    return root


def split_off_train(beir: Path) -> None:
    """Judge q1 and q2 in train and only q3 and q4 in test: a tuning split must not share test queries."""
    header = "query-id\tcorpus-id\tscore\n"
    (beir / "qrels" / "train.tsv").write_text(header + "q1\td6\t1\nq2\td4\t1\n", encoding="utf-8")
    (beir / "qrels" / "test.tsv").write_text(header + "q3\td10\t1\nq4\td5\t1\n", encoding="utf-8")


@pytest.fixture(scope="session")
def tiny_flat_build(tiny_model_dir, tmp_path_factory) -> Path:
    """tiny_beir indexed once (flat, with BM25) for tests that each take a copy (shutil.copytree into their tmp_path):
    a build per test cost seconds a file, and a copy keeps a test that edits its index from touching another's."""
    return _build_tiny_flat(tiny_model_dir, tmp_path_factory.mktemp("tiny-flat-build"), with_bm25=True)


@pytest.fixture(scope="session")
def tiny_dense_build(tiny_model_dir, tmp_path_factory) -> Path:
    """tiny_flat_build without its BM25 part, to copy the same way."""
    return _build_tiny_flat(tiny_model_dir, tmp_path_factory.mktemp("tiny-dense-build"), with_bm25=False)


def _build_tiny_flat(model_dir: Path, root: Path, with_bm25: bool) -> Path:
    from retriever.encoder import Encoder, EncoderSettings
    from retriever.indexing import IndexParams, encode_and_index
    from retriever.lexical import LexicalParams

    encoder = Encoder(EncoderSettings(model=str(model_dir)), device="cpu", dtype="fp32")
    encode_and_index(write_tiny_beir(root / "tiny-beir"), root / "idx", encoder, IndexParams("flat"), progress=False,
                     lexical=LexicalParams() if with_bm25 else None)
    return root / "idx"


@pytest.fixture()
def index(tiny_flat_build, tmp_path):
    """A copy of tiny_flat_build (flat, with BM25) to change: the BM25 part's tests (adding it, opening it)."""
    return shutil.copytree(tiny_flat_build, tmp_path / "idx")


def bm25_hits(index) -> list[tuple[str, float]]:
    from retriever.searching import Searcher

    return [(hit.id, round(hit.score, 5)) for hit in Searcher(index, device="cpu").search(["honey bee flower"], k=5,
                                                                                         mode="bm25")[0]]


def with_lexical_record(index, **changes) -> None:
    """The index's manifest with ``changes`` made to its BM25 record."""
    from retriever.index_folder import MANIFEST_FILE

    manifest = json.loads((index / MANIFEST_FILE).read_text())
    manifest["lexical"].update(changes)
    (index / MANIFEST_FILE).write_text(json.dumps(manifest))


def texts_of_many_lengths(count: int) -> list[str]:
    """Texts of 1 to 13 words, so batches of them mix token counts."""
    words = ("cat dog river ball city tea honey bee flower lava rock moon planet whale ocean train bridge heart blood "
             "brain solar power sun light energy wind rain cloud storm").split()
    return [" ".join(words[(i * 7 + j) % len(words)] for j in range(1 + i % 13)) for i in range(count)]


def shared_dataset(name: str) -> Path:
    """A dataset under ../shared/datasets, or skip the test saying why."""
    path = SHARED_DATASETS / name
    if not (path / "corpus.jsonl").is_file():
        pytest.skip(f"{path} is absent (benchmark data lives in ../shared/datasets beside the repo)")
    return path


@pytest.fixture
def one_torch_thread():
    """Tiny models gain nothing from threads, and on a shared CPU two spinning threads run 5-20x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def local_ray():
    """One local Ray (2 CPUs, no dashboard) shared by every test that needs it: starting Ray costs seconds."""
    ray = pytest.importorskip("ray", reason="Ray is the optional extra [ray]; .ci/run installs it")
    import logging

    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    yield ray
    ray.shutdown()


def too_many(per_worker: int = 1) -> int:
    """More workers than this machine's cores hold (Ray counts the machine's cores, or a container's fewer)."""
    return (os.cpu_count() or 1) // per_worker + 1


class _WritesMarker:
    """Unpickling this object writes a file: a stand-in for code hidden in a checkpoint."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('ran')",)


def plant_pickles(folder: Path, marker: Path) -> Path:
    """Replace every pickled state file a checkpoint may hold with one that writes ``marker`` when loaded."""
    live = folder.parent / "live-payload.pt"
    torch.save(_WritesMarker(marker), live)
    torch.load(live, weights_only=False)  # the payload works: an unsafe load would run it
    assert marker.exists()
    marker.unlink()
    live.unlink()
    for name in ("optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state.pth", "rng_state_0.pth", "rng_state_1.pth",
                 "training_args.bin", "state.pt", "trainer_state.pt", "model.pt"):
        torch.save(_WritesMarker(marker), folder / name)
    return marker


@pytest.fixture()
def hub_snapshot(tmp_path, monkeypatch):
    """Places a folder in a local hub cache as ORG/NAME's snapshot: how a hub id is read here, offline."""
    from huggingface_hub import constants

    from retriever.model_names import hub_json_files

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    hub_json_files.cache_clear()

    def place(folder: Path, hub_id: str) -> None:
        repo = tmp_path / "cache" / ("models--" + hub_id.replace("/", "--"))
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text("0" * 40)
        shutil.copytree(folder, repo / "snapshots" / ("0" * 40))

    yield place
    hub_json_files.cache_clear()


def with_another_corpus(dataset: Path, folder: Path) -> Path:
    """A copy of a BEIR folder whose corpus holds one passage more: judgments an index of ``dataset`` holds the ids
    of, but of another collection."""
    shutil.copytree(dataset, folder)
    with open(folder / "corpus.jsonl", "a", encoding="utf-8") as corpus:
        corpus.write('{"_id": "d13", "title": "", "text": "more"}\n')
    return folder


# Runs each [cwd, arguments] of argv[1] (JSON) through the CLI in turn, in one process, ending each command's
# standard error with '== EXIT_CODE [heavy libraries imported so far]'; a crash prints its traceback first.
_COMMANDS_IN_ONE_PROCESS = """
import json, os, sys, traceback
from retriever.cli import main
for cwd, arguments in json.loads(sys.argv[1]):
    os.chdir(cwd)
    try:
        main(arguments, prog_name="retriever")
        code = 0
    except SystemExit as exit:
        code = 0 if exit.code is None else exit.code
    except BaseException:
        traceback.print_exc()
        code = "crashed"
    imported = sorted(name for name in ("faiss", "ray", "torch", "transformers") if name in sys.modules)
    print(f"== {code} {json.dumps(imported)}", file=sys.stderr, flush=True)
"""


def nothing_created_in(folder: Path, monkeypatch) -> None:
    """Make ``folder`` read-only to this process: mkdir of an entry in it raises EACCES. The suite runs as root,
    which ignores permission bits, so a read-only folder is simulated."""
    mkdir = Path.mkdir

    def refused(self, *args, **kwargs):
        if self.parent == folder:
            raise PermissionError(13, "Permission denied", str(self))
        return mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", refused)


def commands_in_one_process(runs: list[tuple[Path, list[str]]]) -> list[tuple[int | str, list[str], list[str]]]:
    """Each command line (run in its folder) as (exit code, its lines of standard error, which of FAISS, Ray, torch
    and transformers were imported once it ended), from one process: a launch per command line cost seconds of imports each. A library
    once imported stays imported, so a command's list covers the commands before it."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", _COMMANDS_IN_ONE_PROCESS,
                             json.dumps([[str(cwd), arguments] for cwd, arguments in runs])],
                            capture_output=True, text=True, timeout=600)
    answers, lines = [], []
    for line in result.stderr.splitlines():
        if line.startswith("== "):
            code, imported = line[3:].split(" ", 1)
            answers.append((int(code) if code.lstrip("-").isdigit() else code, lines, json.loads(imported)))
            lines = []
        else:
            lines.append(line)
    assert result.returncode == 0 and len(answers) == len(runs) and not lines, result.stderr
    return answers


@pytest.fixture()
def batches_searched(monkeypatch) -> list:
    """Searcher.run_batches in batches of one query, failing the search if a batch before the one just handed on is
    still held anywhere: what searches of a whole split (evaluate, mine) must not do. Yields the list of batches
    searched (weak references to their hit lists); ``Searcher.run_batches.__wrapped__`` is the search unwatched."""
    import weakref

    from retriever.searching import Searcher

    class Hits(dict):
        pass

    searched, earlier = Searcher.run_batches, []

    def run_batches(self, *args, **kwargs):
        for number, part in enumerate(searched(self, *args, **kwargs)):
            assert all(ref() is None for batch in earlier[:number - 1] for ref in batch), "an earlier batch is held"
            part = {qid: Hits(hits) for qid, hits in part.items()}
            earlier.append([weakref.ref(hits) for hits in part.values()])
            yield part
    run_batches.__wrapped__ = searched  # the search as it is, for a test to put back
    monkeypatch.setattr(Searcher, "run_batches", run_batches)
    monkeypatch.setattr(Searcher, "queries_per_batch", lambda self, depth, batch_size=256: 1)
    return earlier


# Imports what a CLI run spends its first seconds on, then waits for a line on standard input before running the code
# after it (a process started early, for a test that needs it only later)
_WARMED_PRELUDE = """
import sys
import faiss, torch
from transformers import AutoModel, AutoTokenizer
sys.stdin.readline()
"""


def warmed_process(code: str, arguments: list[str], **popen):
    """``python -c CODE ARGUMENTS``, with torch, transformers and FAISS imported and the process then held until a
    line comes on its standard input (``communicate("go\\n")``, or bytes): started while an earlier process of the
    test runs, its seconds of imports overlap that one's instead of adding to the test's time."""
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-c", _WARMED_PRELUDE + code, *arguments], stdin=subprocess.PIPE, **popen)


# An ivf-ondisk build of 400 random documents, shared by the on-disk index's tests (test_ondisk, test_partwork,
# test_part_processes, distributed/test_ray_parts); module-scoped, so each of those files builds its own.
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


def contrastive_batch_loss(queries, passages, batch: dict):
    """The training loss of a collated batch's embeddings (τ 0.05, judged positives masked), as the trainer
    takes it."""
    from retriever.training.loss import contrastive_loss, judged_positive_mask

    mask = judged_positive_mask(batch["judged_keys"], batch["passage_keys"], batch["targets"])
    return contrastive_loss(queries, passages, batch["targets"], 0.05, mask)


def fake_cgroup_tree(tmp_path: Path, membership: str, files: dict[str, str]) -> tuple[Path, Path]:
    """A cgroup mount holding ``files`` (path under the mount: text) and a /proc/self/cgroup of ``membership``, for
    ``retriever.cgroups``' CGROUPS and MEMBERSHIP: (the mount, the membership file)."""
    for name, text in files.items():
        (tmp_path / "fs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fs" / name).write_text(text)
    (tmp_path / "fs").mkdir(exist_ok=True)
    (tmp_path / "cgroup").write_text(membership)
    return tmp_path / "fs", tmp_path / "cgroup"


@pytest.fixture
def many_cores(monkeypatch):
    """A 64-core affinity mask, as a container with a quota sees on a 64-core host."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
