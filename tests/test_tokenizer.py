"""Chapter "Tokenization: byte-level BPE": round trips, the teaching version
and `tiktoken` (built from our own merges) as oracles."""
import random

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer import BPETokenizer, load_corpus
from transformer.tokenizer import END_OF_TEXT, GPT2_PATTERN, merge_pair

import literate  # tools/, on sys.path via the root conftest.py
import oracles

TRICKY = [
    "", "a", " ", "\x00", "a\x00b", "\r\n", "line\r\nline\r\n\r\n",
    " " * 300, "\t\t \n \u3000\u00a0 x", "\n" * 50 + "y",
    "👍", "👍🏽 👋🏿", "👩‍👩‍👧‍👦", "🏳️‍🌈", "🧑🏽‍💻 codes",
    "我们是朋友。", "日本語のテキスト", "한국어",
    "e\u0301", "Z\u0337\u0327a\u0338l\u0336g\u0335o", "ą́̃",
    "שלום עולם", "مرحبا بالعالم", "\u202eabc\u202c", "\u200f\u200e",
    "\ufeffBOM", "\U0010ffff\U000e0001",
    "\ud800", "\udfff", "a\ud800b", "\udc00\ud800", "\ud83d\ude00",
    " \ud800\ud800 x", "don't we'll I'M they've", "1234567890 ١٢٣ ⅫⅣ",
    "<|endoftext|>", "a<|endoftext|>b<|endoftext|>", "<|endoftext",
    "Is't not enough, young man, that I did never?",
]

ANY_CHAR = st.characters(exclude_categories=())  # surrogates included
PIECES = st.sampled_from(TRICKY + [" ", "  ", "'s", "ab", "\n\n"])
TEXTS = st.lists(st.text(ANY_CHAR, max_size=12) | PIECES,
                 max_size=12).map("".join)


# the chapter's teaching version, loaded from its source (never copied)
bpe_train_teaching = literate.chapter_definition("03_tokenizer",
                                                 "bpe_train_teaching")


tiktoken_from = oracles.tiktoken_of


@pytest.fixture(scope="module")
def corpus():
    return load_corpus()


@pytest.fixture(scope="module")
def small(corpus):
    """Trained on Shakespeare plus the tricky strings, so some merges join
    bytes of multi-byte characters."""
    text = corpus[:40_000] + "".join(TRICKY) * 3
    return BPETokenizer.train(text, 700)


@pytest.fixture(scope="module")
def big(corpus):
    return BPETokenizer.train(corpus[:200_000], 2048)


def test_worked_example():
    tok = BPETokenizer.train("aaabdaaabac", 259, pattern=None,
                             special_tokens=())
    assert tok.merges == [(97, 97), (97, 98), (256, 257)]
    assert tok.vocab[258] == b"aaab"
    assert tok.encode("aaabdaaabac") == [258, 100, 258, 97, 99]
    assert bpe_train_teaching("aaabdaaabac", 259) == tok.merges


def test_tie_break_smallest_pair_first():
    # every pair occurs once: the smallest (first id, second id) wins
    tok = BPETokenizer.train("ba ab", 257, pattern=None, special_tokens=())
    assert tok.merges == [(32, 97)]
    # (a, b) and (c, d) both occur twice
    tok = BPETokenizer.train("cdab cdab", 257, pattern=GPT2_PATTERN,
                             special_tokens=())
    assert tok.merges == [(97, 98)]


def test_vocab_layout(small):
    assert all(small.vocab[i] == bytes([i]) for i in range(256))
    for k, (a, b) in enumerate(small.merges):
        assert small.vocab[256 + k] == small.vocab[a] + small.vocab[b]
    assert small.special_tokens == {END_OF_TEXT: 256 + len(small.merges)}
    assert small.vocab_size == len(small.vocab) == 700
    assert small.pattern == GPT2_PATTERN


@pytest.mark.parametrize("s", TRICKY)
def test_round_trip_tricky(small, s):
    assert small.decode(small.encode(s)) == s
    assert small.decode(small.encode(s, allowed_special="all")) == s
    assert small.decode(small.encode(s), errors="strict") == s
    assert small.decode_bytes(small.encode_bytes(
        s.encode("utf-8", "surrogatepass"))) == s.encode(
        "utf-8", "surrogatepass")


@settings(max_examples=300, deadline=None)
@given(s=TEXTS)
def test_round_trip_str(small, s):
    ids = small.encode(s)
    assert small.decode(ids) == s
    assert small.special_tokens[END_OF_TEXT] not in ids
    # pre-tokenizing the bytes splits exactly where the text splits
    assert small.encode_bytes(s.encode("utf-8", "surrogatepass")) == ids


@settings(max_examples=300, deadline=None)
@given(b=st.binary(max_size=200))
def test_round_trip_bytes(small, b):
    assert small.decode_bytes(small.encode_bytes(b)) == b


@settings(max_examples=200, deadline=None)
@given(b=st.binary(max_size=100))
def test_decode_invalid_utf8_like_tiktoken(small, b):
    """Invalid bytes become U+FFFD exactly as Python's (and tiktoken's)
    "replace"; the 3-byte form of a lone surrogate decodes to it."""
    ids = small.encode_bytes(b)
    enc = tiktoken_from(small)
    if regex.search(rb"\xed[\xa0-\xbf][\x80-\xbf]", b) is None:
        assert small.decode(ids) == b.decode("utf-8", "replace")
        assert small.decode(ids) == enc.decode(ids)
    try:
        b.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        with pytest.raises(ValueError, match="ids: bytes"):
            small.decode(ids, errors="strict")
    else:
        assert small.decode(ids, errors="strict") == b.decode(
            "utf-8", "surrogatepass")


def test_lone_surrogates():
    tok = BPETokenizer.train("x", 300, special_tokens=())
    assert tok.encode("\ud800") == [0xED, 0xA0, 0x80]
    assert tok.decode([0xED, 0xA0, 0x80]) == "\ud800"
    # a surrogate *pair* written as two code points stays two code points
    assert tok.decode(tok.encode("\ud83d\ude00")) == "\ud83d\ude00"
    assert tok.decode(tok.encode("😀")) == "😀"


@settings(max_examples=60, deadline=None)
@given(s=st.text(st.sampled_from("aab c"), max_size=40),
       n=st.integers(0, 25), use_pattern=st.booleans())
def test_incremental_equals_teaching_small(s, n, use_pattern):
    """Small alphabets make many ties and overlapping pairs (a a a)."""
    pattern = GPT2_PATTERN if use_pattern else None
    tok = BPETokenizer.train(s, 256 + n, pattern=pattern, special_tokens=())
    assert tok.merges == bpe_train_teaching(s, 256 + n, pattern)


def test_incremental_equals_teaching_corpus(corpus):
    text = corpus[100_000:110_000] + "".join(TRICKY)
    tok = BPETokenizer.train(text, 406, special_tokens=())
    assert tok.merges == bpe_train_teaching(text, 406, GPT2_PATTERN)
    assert len(tok.merges) == 150


def test_training_ignores_document_order(corpus):
    docs = [d for d in corpus[:60_000].split("\n\n") if d]
    shuffled = docs[:]
    random.Random(0).shuffle(shuffled)
    assert shuffled != docs
    a = BPETokenizer.train(END_OF_TEXT.join(docs), 600)
    b = BPETokenizer.train(END_OF_TEXT.join(shuffled), 600)
    assert a.merges == b.merges


def test_special_token_never_merged():
    text = END_OF_TEXT.join(["hi there"] * 200)
    tok = BPETokenizer.train(text, 300, pattern=None)
    eot = tok.special_tokens[END_OF_TEXT]
    learned = [tok.vocab[256 + k] for k in range(len(tok.merges))]
    assert not any(b"<|" in t or b"|>" in t for t in learned)
    assert tok.encode(END_OF_TEXT, allowed_special="all") == [eot]
    assert tok.encode(END_OF_TEXT, allowed_special={END_OF_TEXT}) == [eot]
    plain = tok.encode(END_OF_TEXT)
    assert eot not in plain and tok.decode(plain) == END_OF_TEXT
    ids = tok.encode(text, allowed_special="all")
    assert ids.count(eot) == 199 and tok.decode(ids) == text


def test_tiktoken_oracle_whole_corpus(corpus, big):
    enc = tiktoken_from(big)
    ids = big.encode(corpus)
    assert ids == enc.encode_ordinary(corpus)
    assert big.decode(ids) == corpus
    # paragraphs as documents: special tokens between them
    paragraphs = corpus[:500_000].split("\n\n")
    docs = END_OF_TEXT.join(paragraphs)
    ids = big.encode(docs, allowed_special="all")
    assert ids == enc.encode(docs, allowed_special="all")
    eot = big.special_tokens[END_OF_TEXT]
    assert ids.count(eot) == len(paragraphs) - 1


@pytest.mark.parametrize("s", TRICKY)
def test_tiktoken_oracle_tricky(small, s):
    enc = tiktoken_from(small)
    # tiktoken replaces lone surrogates by U+FFFD before encoding (it can
    # only pass valid UTF-8 to Rust); we keep them, so compare on its text
    valid = s.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    assert small.encode(valid) == enc.encode_ordinary(s)
    if valid == s:
        assert small.encode(s, allowed_special="all") == enc.encode(
            s, allowed_special="all")


def test_save_load(tmp_path, small):
    path = tmp_path / "small.bpe"
    small.save(path)
    lines = path.read_text(encoding="utf-8").split("\n")
    assert lines[0] == "transformer-bpe 2"
    loaded = BPETokenizer.load(path)
    assert loaded.merges == small.merges and loaded.vocab == small.vocab
    assert loaded.pattern == small.pattern
    assert loaded.special_tokens == small.special_tokens
    for s in TRICKY:
        assert loaded.encode(s, allowed_special="all") == small.encode(
            s, allowed_special="all")
    plain = BPETokenizer.train("aaabdaaabac", 259, pattern=None,
                               special_tokens=())
    plain.save(tmp_path / "plain.bpe")
    again = BPETokenizer.load(tmp_path / "plain.bpe")
    assert again.pattern is None and again.merges == plain.merges


def _corrupt(tmp_path, small, edit):
    path = tmp_path / "bad.bpe"
    small.save(path)
    lines = path.read_text(encoding="utf-8").split("\n")
    path.write_text("\n".join(edit(lines)), encoding="utf-8")
    return path


@pytest.mark.parametrize("edit", [
    lambda ls: ["transformer-bpe 3"] + ls[1:],  # wrong version
    lambda ls: ["something-else 1"] + ls[1:],  # not our format
    lambda ls: ls[:-5],  # truncated
    lambda ls: ls[:1] + ["{not json"] + ls[2:],  # header
    lambda ls: ls[:2] + ["1 2\t\"x\""] + ls[3:],  # merge edited
    lambda ls: ls[:2] + ["99999 1"] + ls[3:],  # id out of range
    lambda ls: ls[:2] + ["a b"] + ls[3:],  # not ids
    lambda ls: [],  # empty
])
def test_load_rejects_bad_files(tmp_path, small, edit):
    with pytest.raises(ValueError, match="path:"):
        BPETokenizer.load(_corrupt(tmp_path, small, edit))


def test_bad_input(tmp_path, small):
    cases = [
        (lambda: BPETokenizer.train("abc", 256), "vocab_size"),
        (lambda: BPETokenizer.train("abc", 300.0), "vocab_size"),
        (lambda: BPETokenizer.train("abc", 257, special_tokens=("a", "b")),
         "vocab_size"),
        (lambda: BPETokenizer.train(b"abc", 300), "text"),
        (lambda: BPETokenizer.train("abc", 300, special_tokens="<s>"),
         "special_tokens"),
        (lambda: BPETokenizer.train("abc", 300, special_tokens=("", )),
         "special_tokens"),
        (lambda: BPETokenizer.train("abc", 300, pattern="("), "pattern"),
        (lambda: small.encode(b"abc"), "text"),
        (lambda: small.encode(None), "text"),
        (lambda: small.encode("a", allowed_special={"<s>"}),
         "allowed_special"),
        (lambda: small.encode("a", allowed_special=3), "allowed_special"),
        (lambda: small.encode_bytes("abc"), "data"),
        (lambda: small.decode([1, -1]), "ids"),
        (lambda: small.decode([small.vocab_size]), "ids"),
        (lambda: small.decode(["a"]), "ids"),
        (lambda: small.decode("abc"), "ids"),
        (lambda: small.decode(b"abc"), "ids"),
        (lambda: small.decode(None), "ids"),
        (lambda: small.decode([1], errors="ignore"), "errors"),
        (lambda: BPETokenizer([(1, 256)]), "merges"),
        (lambda: BPETokenizer.load(tmp_path / "missing.bpe"), "path"),
    ]
    for call, name in cases:
        with pytest.raises(ValueError, match=name):
            call()


def test_mutations_are_caught(small):
    """The broken variants the tests above guard against really differ."""
    # ties to the *largest* pair instead of the smallest
    text = "cdab cdab"
    chunks = [list(c.encode()) for c in regex.findall(GPT2_PATTERN, text)]
    counts = {}
    for ids in chunks:
        for pair in zip(ids, ids[1:]):
            counts[pair] = counts.get(pair, 0) + 1
    wrong = max(counts, key=lambda p: (counts[p], p))
    right = BPETokenizer.train(text, 257, special_tokens=()).merges[0]
    assert wrong != right == (97, 98)
    # replaying merges newest-first instead of in training order
    s = "Is't not enough, young man, that I did never?"
    ids = list(s.encode())
    for k in reversed(range(len(small.merges))):
        ids = merge_pair(ids, small.merges[k], 256 + k)
    assert ids != small.encode(s) == tiktoken_from(small).encode_ordinary(s)
