"""`encode`/`build`/`index` --ray on the command line: a real local Ray (the session's), and the errors without it."""
from __future__ import annotations

import json
import sys
import time

from click.testing import CliRunner

from retriever.cli import main
from retriever.shards import list_shards, read_shard

COMMON = ["--device", "cpu", "--dtype", "fp32", "--shard-size", "4"]
ONDISK = ["--index-type", "ivf-ondisk", "--nlist", "2", "--part-size", "4", "--train-size", "12"]


def cpus_freed(ray, seconds: float = 30) -> bool:
    """Ray frees a killed actor's CPUs shortly after the kill returns."""
    deadline = time.monotonic() + seconds
    while ray.available_resources().get("CPU") != 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    return ray.available_resources().get("CPU") == 2


def test_build_with_ray_indexes_the_same_shards_as_encode(local_ray, tmp_path, tiny_model_dir, tiny_beir):
    runner = CliRunner()
    model = ["--model", str(tiny_model_dir)]
    result = runner.invoke(main, ["build", str(tiny_beir), "--output", str(tmp_path / "idx"), *model, *COMMON,
                                  *ONDISK, "--ray", "--ray-workers", "2", "--json"])  # encoder actors, then parts
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["vectors"] == 12
    assert json.loads((tmp_path / "idx" / "manifest.json").read_text())["index"]["parts"] == 3
    assert cpus_freed(local_ray), "the encoder actors are let go"
    result = runner.invoke(main, ["encode", str(tiny_beir), "--output", str(tmp_path / "one"), *model, *COMMON])
    assert result.exit_code == 0, result.output
    ray_shards, one_shards = list_shards(tmp_path / "idx.shards"), list_shards(tmp_path / "one")
    assert [p.name for p in ray_shards] == [p.name for p in one_shards] == [
        f"embeddings-w000of001-{part:05d}.parquet" for part in range(3)]
    assert [read_shard(p)[0] for p in ray_shards] == [read_shard(p)[0] for p in one_shards]


def test_ray_without_the_extra_says_how_to_install(monkeypatch, tmp_path, tiny_beir):
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` raise ImportError
    result = CliRunner().invoke(main, ["encode", str(tiny_beir), "--output", str(tmp_path / "out"), "--ray"])
    assert result.exit_code == 1
    assert "pip install 'retriever[ray]'" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_a_path_given_as_ray_address_is_refused(tmp_path, tiny_beir):
    result = CliRunner().invoke(main, ["encode", str(tiny_beir), "--output", str(tmp_path / "out"),
                                       "--ray", str(tiny_beir)])
    assert result.exit_code == 1 and "is not a Ray address" in result.output


def test_ray_before_the_corpus_says_it_took_the_corpus_as_its_address(tmp_path, tiny_beir):
    """The README's own warning (`--ray` takes the next word) was answered by click's "Missing argument 'CORPUS'",
    which names neither --ray nor the fix."""
    for command in ("encode", "build"):
        result = CliRunner().invoke(main, [command, "--ray", str(tiny_beir), "--output", str(tmp_path / "out")])
        assert result.exit_code == 2, result.output
        assert f"--ray took '{tiny_beir}' as its Ray address" in result.output, result.output
        assert "put --ray after the corpus, or write --ray=auto" in result.output
        assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_index_fills_ivf_ondisk_parts_as_ray_tasks(local_ray, tmp_path, tiny_model_dir, tiny_beir):
    runner = CliRunner()
    result = runner.invoke(main, ["encode", str(tiny_beir), "--output", str(tmp_path / "shards"),
                                  "--model", str(tiny_model_dir), *COMMON])
    assert result.exit_code == 0, result.output
    index = ["index", str(tmp_path / "shards"), "--corpus", str(tiny_beir)]
    result = runner.invoke(main, [*index, "-o", str(tmp_path / "flat"), "--ray"])
    assert result.exit_code == 2 and "--ray fills the parts of an ivf-ondisk index" in result.output
    result = runner.invoke(main, [*index, "-o", str(tmp_path / "mixed"), *ONDISK, "--ray", "--parallel-parts", "2"])
    assert result.exit_code == 2 and "use --ray-workers and --ray-cpus-per-worker" in result.output
    result = runner.invoke(main, [*index, "-o", str(tmp_path / "idx"), *ONDISK, "--ray", "--ray-workers", "2"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert (manifest["index"]["count"], manifest["index"]["parts"]) == (12, 3)
