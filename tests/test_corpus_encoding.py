from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fixtures_models import WORDS
from fixtures_processes import warmed_process
from retriever.corpus import Fields
from retriever.corpus_encoding import encode_corpus
from retriever.encode_result import describe
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.indexing import IndexParams, build_index
from retriever.shard_completeness import check_complete
from retriever.shards import list_shards, read_shard, read_shard_metadata


def write_corpus(path: Path, count: int, words: int = 60, seed: int = 0) -> Path:
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(count):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, words)))
            handle.write(json.dumps({"_id": f"doc{i}", "title": "", "text": text}) + "\n")
    return path


def shard_contents(folder: Path) -> list[tuple[str, list[str], bytes]]:
    result = []
    for shard in list_shards(folder):
        ids, vectors = read_shard(shard)
        result.append((shard.name, ids, vectors.tobytes()))
    return result


def encoder(model_dir) -> Encoder:
    return Encoder(EncoderSettings(model=str(model_dir)), device="cpu", dtype="fp32", batch_size=8)


def test_shards_have_fixed_rows_and_metadata(tiny_model_dir, tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl", 25)
    result = encode_corpus(corpus, tmp_path / "out", encoder(tiny_model_dir), shard_size=10, progress=False)
    assert (result.documents, result.encoded, result.shards) == (25, 25, 3)
    shards, metadata = check_complete(tmp_path / "out")
    assert [pq.read_metadata(s).num_rows for s in shards] == [10, 10, 5]
    assert metadata["pooling"] == "mean" and metadata["dim"] == 32 and metadata["weights_sha256"]


@pytest.mark.parametrize("shard_size, message", [(np.int64(10), None), (0, "of at least 1, not 0"), (2.5, "of at least 1, not 2.5")])
def test_shard_size_is_a_whole_number_numpy_ones_included(tiny_model_dir, tmp_path, shard_size, message):
    """np.int64 reached the shard metadata's json.dump after the first shard was encoded."""
    corpus = write_corpus(tmp_path / "c.jsonl", 12)
    if message:
        with pytest.raises(RetrieverError, match=f"^--shard-size must be a whole number {message}$"):
            encode_corpus(corpus, tmp_path / "out", encoder(tiny_model_dir), shard_size=shard_size, progress=False)
        assert not (tmp_path / "out").exists()
        return
    result = encode_corpus(corpus, tmp_path / "out", encoder(tiny_model_dir), shard_size=shard_size, progress=False)
    assert (result.documents, result.shards) == (12, 2)


@pytest.mark.parametrize("split, message", [
    ({"worker_index": np.int64(1), "num_workers": np.int64(2)}, None),
    ({"num_workers": 0}, "--num-workers must be a whole number of at least 1, not 0"),
    ({"num_workers": 2.0}, "--num-workers must be a whole number of at least 1, not 2.0"),
    ({"worker_index": True, "num_workers": 2}, "--worker-index must be a whole number of at least 0, not True"),
    ({"worker_index": "0"}, "--worker-index must be a whole number of at least 0, not '0'")])
def test_the_split_is_whole_numbers_numpy_ones_included(tiny_model_dir, tmp_path, split, message):
    """np.int64 reached the shard metadata's json.dump after the first part was encoded; num_workers 0 said 'must be
    in 0..-1'; a float broke a file name's format; worker_index True wrote a shard the next read refused (probe 17)."""
    corpus = write_corpus(tmp_path / "c.jsonl", 5)
    if message:
        with pytest.raises(RetrieverError, match=f"^{message}$"):
            encode_corpus(corpus, tmp_path / "out", encoder(tiny_model_dir), progress=False, **split)
        assert not (tmp_path / "out").exists()
        return
    result = encode_corpus(corpus, tmp_path / "out", encoder(tiny_model_dir), progress=False, **split)
    assert (result.documents, result.encoded) == (5, 2)


@pytest.mark.parametrize("argument, message", [
    ({"encoder": "minilm"}, "encoder must be an Encoder (or a pool such as RayEncoderPool), not str 'minilm'"),
    ({"encoder": None}, "encoder must be an Encoder (or a pool such as RayEncoderPool), not NoneType None"),
    ({"corpus": None}, "corpus must be a path to a corpus file or BEIR folder, not NoneType None"),
    ({"output": 5}, "output must be a path to the shard folder, not int 5"),
    ({"fields": ("_id", "text")}, "fields must be retriever.corpus.Fields, e.g. Fields(id='_id', text='text'), not "
                                  "tuple ('_id', 'text')")])
def test_library_arguments_of_the_wrong_kind_are_one_line(tiny_model_dir, tmp_path, argument, message):
    """An AttributeError ('str' object has no attribute 'metadata') or pathlib's TypeError naming no argument, as
    encode_and_index said before it checked its encoder (probe 17)."""
    call = {"corpus": write_corpus(tmp_path / "c.jsonl", 3), "output": tmp_path / "out",
            "encoder": encoder(tiny_model_dir), **argument}
    fields = call.pop("fields", Fields())
    with pytest.raises(RetrieverError, match=f"^{re.escape(message)}$"):
        encode_corpus(call["corpus"], call["output"], call["encoder"], fields=fields, progress=False)
    assert not (tmp_path / "out").exists()


def test_a_failed_encode_into_new_folders_leaves_none_of_them(tiny_model_dir, tmp_path):
    """`encode c.jsonl -o new/sub/shards` stopped by a malformed line removed shards/ but left new/sub/ behind, empty,
    as atomic writes no longer do (probe round 17)."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"_id": "a", "text": "x"}\n{bad\n')
    (tmp_path / "kept").mkdir()
    for output in (tmp_path / "new" / "sub" / "shards", tmp_path / "kept" / "a" / "shards"):
        with pytest.raises(RetrieverError, match="malformed JSON"):
            encode_corpus(corpus, output, encoder(tiny_model_dir), progress=False)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["c.jsonl", "kept"]
    assert not list((tmp_path / "kept").iterdir())


def test_workers_split_the_corpus(tiny_model_dir, tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl", 9)
    enc = encoder(tiny_model_dir)
    encode_corpus(corpus, tmp_path / "out", enc, shard_size=2, worker_index=0, num_workers=2, progress=False)
    with pytest.raises(RetrieverError, match="worker 1 of 2 has not finished"):
        check_complete(tmp_path / "out")
    encode_corpus(corpus, tmp_path / "out", enc, shard_size=2, worker_index=1, num_workers=2, progress=False)
    shards, _ = check_complete(tmp_path / "out")
    ids = [i for s in shards for i in read_shard(s)[0]]
    assert sorted(ids) == sorted(f"doc{i}" for i in range(9))


def test_rerun_with_other_encoder_is_refused(tiny_model_dir, tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl", 5)
    encode_corpus(corpus, tmp_path / "out", encoder(tiny_model_dir), shard_size=2, progress=False)
    other = Encoder(EncoderSettings(model=str(tiny_model_dir), pooling="cls"), device="cpu", dtype="fp32")
    with pytest.raises(RetrieverError, match="different encoder.*pooling"):
        encode_corpus(corpus, tmp_path / "out", other, shard_size=2, progress=False)


@pytest.mark.usefixtures("one_torch_thread")
def test_sigkill_then_rerun_gives_identical_shards(tiny_model_dir, tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl", 3000, words=100)
    command = [sys.executable, "-m", "retriever", "encode", str(corpus), "--model", str(tiny_model_dir),
               "--dtype", "fp32", "--device", "cpu", "--batch-size", "4", "--shard-size", "100"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    killed = tmp_path / "killed"
    process = subprocess.Popen(command + ["--output", str(killed)], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    # the rerun's process imports while the killed run runs, and encodes while the uninterrupted reference is
    # encoded here, on one thread as the processes are (a process of its own cost seconds of imports)
    rerun = warmed_process("from retriever.cli import main; main(prog_name='retriever')",
                           [*command[3:], "--output", str(killed)], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (killed.exists() and list_shards(killed)):
            time.sleep(0.05)
        time.sleep(random.uniform(0.0, 0.5))
        process.send_signal(signal.SIGKILL)
        process.wait()
        partial = list_shards(killed)
        assert 0 < len(partial) < 30, "the run must be killed part-way for this test to mean anything"

        rerun.stdin.write(b"go\n")
        rerun.stdin.flush()
        reference = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32", batch_size=4)
        encode_corpus(corpus, tmp_path / "reference", reference, shard_size=100, progress=False)
        _, said = rerun.communicate(timeout=600)
        assert rerun.returncode == 0, said.decode()[-3000:]
    finally:
        if rerun.poll() is None:  # a failed check above
            rerun.kill()
            rerun.wait()
    assert shard_contents(killed) == shard_contents(tmp_path / "reference")
    assert not list(killed.glob(".*tmp*")), "no temporary files are left behind"


@pytest.mark.parametrize("where", ["output-is-a-file", "parent-is-a-file"])
def test_a_shard_folder_that_cannot_be_made_is_one_error(tiny_model_dir, tmp_path, where):
    corpus = write_corpus(tmp_path / "c.jsonl", 3)
    (tmp_path / "afile").write_text("mine")
    output = tmp_path / "afile" if where == "output-is-a-file" else tmp_path / "afile" / "shards"
    expected = "afile: is a file, not a folder" if where == "output-is-a-file" else "afile is a file, so .*shards cannot be created under it"
    with pytest.raises(RetrieverError, match=f"{expected}.*choose another --output"):
        encode_corpus(corpus, output, encoder(tiny_model_dir), progress=False)
    assert (tmp_path / "afile").read_text() == "mine"


def test_an_index_folder_is_refused_as_a_shard_folder(tiny_model_dir, tmp_path):
    """`encode -o INDEX` wrote shards and a done marker into an index folder, outside its manifest's records."""
    corpus = write_corpus(tmp_path / "c.jsonl", 3)
    index = tmp_path / "idx"
    index.mkdir()
    (index / "manifest.json").write_text("{}")
    with pytest.raises(RetrieverError, match=r"idx: is an index folder; encode into a folder of its own, e\.g\. "):
        encode_corpus(corpus, index, encoder(tiny_model_dir), progress=False)
    assert sorted(p.name for p in index.iterdir()) == ["manifest.json"]


def test_a_resume_with_another_tokenizer_is_refused(tiny_model_dir, tmp_path):
    """Shards record the tokenizer's fingerprint but resume compared weights only: a folder whose tokenizer was
    swapped kept its old shards and encoded the rest with the new vocabulary, and `index` took the mix."""
    corpus = write_corpus(tmp_path / "c.jsonl", 6)
    encode_corpus(corpus, tmp_path / "out", encoder(tiny_model_dir), shard_size=2, progress=False)
    list_shards(tmp_path / "out")[-1].unlink()  # a run killed before its last part
    other = tmp_path / "other-vocab"
    shutil.copytree(tiny_model_dir, other)
    tokenizer = json.loads((other / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    vocab["cat"], vocab["dog"] = vocab["dog"], vocab["cat"]
    (other / "tokenizer.json").write_text(json.dumps(tokenizer))
    with pytest.raises(RetrieverError, match="different encoder.*tokenizer_sha256"):
        encode_corpus(corpus, tmp_path / "out", encoder(other), shard_size=2, progress=False)
    assert len(list_shards(tmp_path / "out")) == 2


def test_a_resume_with_a_tokenizer_normalising_otherwise_is_refused(tiny_model_dir, tmp_path):
    """The same vocabulary with lowercasing turned off passed the vocabulary's fingerprint: the rest of the
    corpus was encoded cased beside lowercased shards."""
    corpus = write_corpus(tmp_path / "c.jsonl", 6)
    encode_corpus(corpus, tmp_path / "out", encoder(tiny_model_dir), shard_size=2, progress=False)
    list_shards(tmp_path / "out")[-1].unlink()
    other = tmp_path / "cased"
    shutil.copytree(tiny_model_dir, other)
    tokenizer = json.loads((other / "tokenizer.json").read_text())
    tokenizer["normalizer"]["lowercase"] = False
    (other / "tokenizer.json").write_text(json.dumps(tokenizer))
    config = json.loads((other / "tokenizer_config.json").read_text())
    (other / "tokenizer_config.json").write_text(json.dumps({**config, "do_lower_case": False}))
    with pytest.raises(RetrieverError, match="different encoder.*tokenizer_behaviour_sha256"):
        encode_corpus(corpus, tmp_path / "out", encoder(other), shard_size=2, progress=False)
    assert len(list_shards(tmp_path / "out")) == 2


def rewrite_vectors(path: Path, vectors: np.ndarray) -> None:
    """Write other vectors into a shard, keeping its ids and its metadata (so every record check still passes)."""
    table = pq.read_table(path)
    flat = pa.array(np.ascontiguousarray(vectors).reshape(-1))
    damaged = pa.table({"id": table.column("id"),
                        "embedding": pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1])})
    pq.write_table(damaged.replace_schema_metadata(table.schema.metadata), path)


def test_a_shard_of_another_width_is_invalid_and_a_rerun_reencodes_it(tiny_model_dir, tmp_path):
    """A shard whose vectors are narrower than its record says was reused by a rerun, and `index` stopped with a
    bare FAISS AssertionError."""
    corpus = write_corpus(tmp_path / "c.jsonl", 6)
    enc = encoder(tiny_model_dir)
    encode_corpus(corpus, tmp_path / "out", enc, shard_size=2, progress=False)
    before = shard_contents(tmp_path / "out")
    shard = list_shards(tmp_path / "out")[1]
    rewrite_vectors(shard, read_shard(shard)[1][:, :16])
    with pytest.raises(RetrieverError, match=r"not a valid shard \(its columns are .*\[16\].*32 float32"):
        read_shard_metadata(shard)
    result = encode_corpus(corpus, tmp_path / "out", enc, shard_size=2, progress=False)
    assert (result.damaged_parts, result.changed_parts, result.skipped) == (1, 0, 4)
    assert shard_contents(tmp_path / "out") == before



def test_a_resume_reencodes_a_shard_whose_vectors_were_damaged_in_place(tiny_model_dir, tmp_path, capsys):
    """The resume check read the ids only: a shard whose vector bytes were damaged in place (bit rot, a bad copy)
    was reused, and `index` then refused it, naming the SHA-256 its vectors no longer match."""
    corpus = write_corpus(tmp_path / "c.jsonl", 6)
    enc = encoder(tiny_model_dir)
    encode_corpus(corpus, tmp_path / "out", enc, shard_size=2, progress=False)
    before = shard_contents(tmp_path / "out")
    shard = list_shards(tmp_path / "out")[1]
    vectors = read_shard(shard)[1]
    vectors[1, 3] = np.nextafter(vectors[1, 3], np.float32(2))  # one bit off: finite, same width, same ids
    rewrite_vectors(shard, vectors)
    capsys.readouterr()
    result = encode_corpus(corpus, tmp_path / "out", enc, shard_size=2, progress=False)
    assert (result.damaged_parts, result.changed_parts, result.skipped, result.encoded) == (1, 0, 4, 2)
    assert describe(result).endswith("; re-encoded 1 damaged shard")
    assert (f"{shard}: its vectors differ from the SHA-256 recorded when it was written (damaged on disk or in a "
            "copy); encoding it again") in capsys.readouterr().err
    assert shard_contents(tmp_path / "out") == before

def test_non_finite_vectors_are_refused_before_they_are_written(tiny_model_dir, tmp_path, monkeypatch):
    """Weights holding inf (or fp16 overflowing) made all-NaN vectors that were written, indexed and searched."""
    corpus = write_corpus(tmp_path / "c.jsonl", 6)
    enc = encoder(tiny_model_dir)
    encode_corpus(corpus, tmp_path / "out", enc, shard_size=2, progress=False)
    shard = list_shards(tmp_path / "out")[0]
    rewrite_vectors(shard, np.full((2, 32), np.nan, dtype=np.float32))
    with pytest.raises(RetrieverError, match="holds NaN or infinite vectors"):
        read_shard(shard)  # what `index` reads
    real = enc.encode_passages

    def poisoned(documents, progress=None):
        vectors = real(documents, progress)
        vectors[-1, 3] = np.inf
        return vectors

    monkeypatch.setattr(enc, "encode_passages", poisoned)
    with pytest.raises(RetrieverError, match=r"NaN or infinite vectors for 1 of 2 passages \(first: id 'doc1'\)"):
        encode_corpus(corpus, tmp_path / "fresh", enc, shard_size=2, progress=False)
    assert not (tmp_path / "fresh").exists()
    with pytest.raises(RetrieverError, match=r"vectors for 1 of 1 passage \(first: id 'doc0'\)"):  # "1 passages"
        encode_corpus(corpus, tmp_path / "fresh", enc, shard_size=1, progress=False)


def test_a_worker_keeps_the_temporaries_of_live_writers(tiny_model_dir, tmp_path):
    """Every start deleted every `.*.tmp-*` in the folder: another worker writing a shard there lost its file and
    stopped. Only temporaries of dead processes go."""
    corpus = write_corpus(tmp_path / "c.jsonl", 4)
    out = tmp_path / "out"
    out.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    live = out / f".embeddings-w000of002-00000.parquet.tmp-{os.getpid()}"
    left = out / f".embeddings-w001of002-00003.parquet.tmp-{dead.stdout.strip()}"
    live.write_bytes(b"being written")
    left.write_bytes(b"left by a killed run")
    encode_corpus(corpus, out, encoder(tiny_model_dir), shard_size=2, worker_index=1, num_workers=2, progress=False)
    assert live.read_bytes() == b"being written" and not left.exists()


def test_a_worker_leaves_the_temporaries_of_other_workers(tiny_model_dir, tmp_path):
    """Workers of a split run on several machines into one shared folder (NFS): whether a process id runs is known
    only on its own machine, so a worker starting deleted the shard another machine's worker was writing (its
    pid runs nowhere here) and that worker stopped. A worker's leftovers are for its own reruns to delete."""
    corpus = write_corpus(tmp_path / "c.jsonl", 4)
    out = tmp_path / "out"
    out.mkdir()
    gone = [subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                           text=True).stdout.strip() for _ in range(2)]
    elsewhere = out / f".embeddings-w000of002-00001.parquet.tmp-{gone[0]}"  # a live writer on another machine
    own = [out / f".embeddings-w001of002-00003.parquet.tmp-{gone[1]}", out / f"._done-w001of002.json.tmp-{gone[1]}"]
    for path in (elsewhere, *own):
        path.write_bytes(b"partly written")
    encode_corpus(corpus, out, encoder(tiny_model_dir), shard_size=2, worker_index=1, num_workers=2, progress=False)
    assert elsewhere.read_bytes() == b"partly written" and not any(path.exists() for path in own)



def test_a_worker_keeps_and_names_its_temporaries_another_host_left(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """A worker moved to another machine (its lock removed there) judged the first machine's pids by its own kernel.
    Names carry the host: this host's dead runs' temporaries go, another host's stay and are named on stderr."""
    import socket

    monkeypatch.setattr(socket, "gethostname", lambda: "node-a")
    corpus = write_corpus(tmp_path / "c.jsonl", 4)
    out = tmp_path / "out"
    out.mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    elsewhere = out / f".embeddings-w001of002-00003.parquet.tmp-{gone}@node-b"
    here = out / f"._done-w001of002.json.tmp-{gone}@node-a"
    for path in (elsewhere, here):
        path.write_bytes(b"partly written")
    encode_corpus(corpus, out, encoder(tiny_model_dir), shard_size=2, worker_index=1, num_workers=2, progress=False)
    assert elsewhere.read_bytes() == b"partly written" and not here.exists()
    assert (f"kept {elsewhere}: written by process {gone} on host node-b, which cannot be seen from here; remove it "
            "once that worker no longer runs there") in capsys.readouterr().err.splitlines()


# Worker 0 of 2, encoding through a PartRunner that stops after its first shard until a line comes on stdin.
HELD_WORKER = """
import sys
from retriever.corpus_encoding import encode_corpus, encode_parts
from retriever.encoder import Encoder, EncoderSettings

class HeldAfterTheFirstShard:
    def __init__(self, encoder): self.encoder = encoder
    def metadata(self): return self.encoder.metadata()
    def run_parts(self, jobs, progress):
        for number, outcome in enumerate(encode_parts(self.encoder, jobs, progress)):
            if number == 0:
                print("held", flush=True)
                sys.stdin.readline()
            yield outcome

corpus, output, model = sys.argv[1:]
encoder = Encoder(EncoderSettings(model=model), device="cpu", dtype="fp32", batch_size=8)
encode_corpus(corpus, output, HeldAfterTheFirstShard(encoder), shard_size=2, worker_index=0, num_workers=2,
              progress=False)
print("done", flush=True)
"""


def held_worker(corpus: Path, output: Path, model_dir: Path) -> subprocess.Popen:
    """Worker 0 of 2 encoding ``corpus`` into ``output`` in another process, held after its first shard."""
    process = subprocess.Popen([sys.executable, "-c", HELD_WORKER, str(corpus), str(output), str(model_dir)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert process.stdout.readline().strip() == "held"
    return process


def test_a_second_run_of_one_worker_is_refused_while_other_workers_encode_beside_it(tiny_model_dir, tmp_path):
    """Two runs of one worker into one folder at once were not refused: each re-encoded most of the share (twice
    the time) and they overwrote each other's shards. Other workers of the split still encode there at once."""
    corpus, out = write_corpus(tmp_path / "c.jsonl", 12), tmp_path / "out"
    # the second run's CLI imports while the holder starts; it runs once a line comes on its stdin
    second = warmed_process("from retriever.cli import main; main(prog_name='retriever')",
                            ["encode", str(corpus), "-o", str(out), "--model", str(tiny_model_dir), "--dtype", "fp32",
                             "--shard-size", "2", "--worker-index", "0", "--num-workers", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        holder = held_worker(corpus, out, tiny_model_dir)
    finally:
        _, second_stderr = second.communicate("go\n", timeout=120)
    try:
        refusal = (f"{out}: another encode of worker 0 of 2 into it is running (pid {holder.pid}); wait for it to "
                   "end or choose another --output")
        assert (second.returncode, second_stderr) == (1, f"error: {refusal}\n")
        with pytest.raises(RetrieverError) as refused:  # a library caller too
            encode_corpus(corpus, out, encoder(tiny_model_dir), shard_size=2, worker_index=0, num_workers=2,
                          progress=False)
        assert str(refused.value) == refusal
        other = encode_corpus(corpus, out, encoder(tiny_model_dir), shard_size=2, worker_index=1, num_workers=2,
                              progress=False)
        assert (other.encoded, other.skipped) == (6, 0)
        holder.stdin.write("go on\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "done"
    finally:
        holder.kill()
        holder.wait()
    shards, _ = check_complete(out)
    assert len(shards) == 6 and not list(out.glob(".*"))  # the locks are gone with their runs


def test_a_lock_left_by_a_killed_run_blocks_nothing_and_is_no_shard(tiny_model_dir, tmp_path):
    corpus, out = write_corpus(tmp_path / "c.jsonl", 12), tmp_path / "out"
    holder = held_worker(corpus, out, tiny_model_dir)
    holder.kill()
    holder.wait()
    assert [p.name for p in out.glob(".*")] == [".encode-w000of002.lock"]
    encode_corpus(corpus, out, encoder(tiny_model_dir), shard_size=2, worker_index=1, num_workers=2, progress=False)
    (out / ".encode-w001of002.lock").write_text(str(holder.pid))  # as if worker 1 was killed after it finished
    result = encode_corpus(corpus, out, encoder(tiny_model_dir), shard_size=2, worker_index=0, num_workers=2,
                           progress=False)
    assert (result.encoded, result.skipped) == (4, 2)
    shards, _ = check_complete(out)
    assert [p.name for p in shards] == [p.name for p in list_shards(out)] and len(shards) == 6
    manifest = build_index(out, corpus, tmp_path / "idx", IndexParams("flat"), progress=False, lexical=None)
    assert manifest["index"]["count"] == 12
