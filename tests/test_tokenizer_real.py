"""Chapter "Tokenization: byte-level BPE", sections "Patterns that would
lose text", "Encoding at real vocabulary sizes", "Real vocabularies" and
"Leaving the book": no pattern loses text, the ASCII twin cuts as `regex`
does, tiktoken rank files load and save with tiktoken's own ids, the
Hugging Face export gives the same ids, hostile files are refused before
anything is built."""
import base64
import json
import time
import tracemalloc

import pytest
import regex
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st
from tiktoken.load import load_tiktoken_bpe
from transformers import PreTrainedTokenizerFast

import transformer.tokenizer as tk
import transformer.tokenizer_files as tokenizer_files
from transformer import BPETokenizer, PreTokenizer, load_corpus
from transformer.tokenizer import END_OF_TEXT, GPT2_PATTERN

# tiktoken's own patterns for GPT-2 (r50k_base) and GPT-4 (cl100k_base)
R50K_PATTERN = (r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++"""
                r"""| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s""")
CL100K_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++"""
                  r"""|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$"""
                  r"""|\s*[\r\n]|\s+(?!\S)|\s""")
PATTERNS = [GPT2_PATTERN, R50K_PATTERN, CL100K_PATTERN]

ANY_CHAR = st.characters(exclude_categories=())  # surrogates included
VALID_CHAR = st.characters(exclude_categories=("Cs",))
PIECES = st.sampled_from([
    " ", "  ", "\n\n", "\r\n", "'s", "'T", "it's", " isn't", "123", "1234",
    "我们", "🙂", "é", "\u3000", "\x85", "\x1c", "<|endoftext|>", "\t x",
    "Is't not enough, young man?", "   end", "\x00"])
TEXTS = st.lists(st.text(ANY_CHAR, max_size=10) | PIECES,
                 max_size=10).map("".join)
VALID_TEXTS = st.lists(st.text(VALID_CHAR, max_size=10) | PIECES,
                       max_size=10).map("".join)
ASCII_TEXTS = st.lists(st.text(st.characters(max_codepoint=127),
                               max_size=12) | PIECES.filter(str.isascii),
                       max_size=12).map("".join)

# a small family of patterns: capturing groups, gaps, lookaheads, empty
# matches, case-insensitive groups
ALTERNATIVES = [
    r"'s|'t|'re", r"('s|'t)", r" ?\p{L}+", r"\p{L}+", r"(\p{L})\p{L}*",
    r" ?\p{N}+", r"\p{N}{1,3}", r" ?[^\s\p{L}\p{N}]+", r"\s+(?!\S)", r"\s+",
    r"\s", r"(?i:'s|'t)", r"[a-z]+", r"x*", r"(?=a)", r"\d", r"\w+",
    r"(\s)(\s)?", r"[^\W\d]+", r"\S{2}", r"\b",
]
PATTERN_FAMILY = st.lists(st.sampled_from(ALTERNATIVES), min_size=1,
                          max_size=4).map("|".join)
TRAIN_TEXT = ("It's a test, isn't it? 1600 ducats; we'll see.  \n\n"
              "我们 🙂 café — the the the ") * 3


@pytest.fixture(scope="module")
def corpus():
    return load_corpus()


@pytest.fixture(scope="module")
def small(corpus):
    text = corpus[:60_000] + "我们是朋友 🙂 café naïve ÆØÅ 日本語 " * 20
    return BPETokenizer.train(text, 800)


def gpt2_byte_order():
    """GPT-2's rank for each byte: printable bytes first, in order."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    order = keep + [b for b in range(256) if b not in keep]
    return {b: rank for rank, b in enumerate(order)}


def write_ranks(path, ranks):
    """A rank file as tiktoken writes one: 'base64 rank' per line."""
    lines = [base64.b64encode(t) + b" %d" % r
             for t, r in sorted(ranks.items(), key=lambda kv: kv[1])]
    path.write_bytes(b"\n".join(lines) + b"\n")


def permuted_file(tmp_path, tok):
    """`tok`'s merges with the single bytes in GPT-2's order."""
    byte_rank = gpt2_byte_order()
    ranks = {bytes([b]): r for b, r in byte_rank.items()}
    ranks.update({tok.vocab[256 + k]: 256 + k
                  for k in range(len(tok.merges))})
    path = tmp_path / "permuted.tiktoken"
    write_ranks(path, ranks)
    return path


def valid(s):
    """The text tiktoken encodes: lone surrogates replaced by U+FFFD."""
    return s.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def without_twin(pattern):
    pre = PreTokenizer(pattern)
    pre.ascii_twin = None
    return pre


# -- no pattern loses text ---------------------------------------------------
def test_grouped_pattern_keeps_every_character():
    t = BPETokenizer([], pattern=r"('s|'t)|\p{L}+|\s+|[^\s\p{L}]+",
                     special_tokens=())
    s = "it's a test, isn't it? 123"
    assert t.decode(t.encode(s)) == s
    assert PreTokenizer(r"('s|'t)|\p{L}+|\s+|[^\s\p{L}]+")(s) == [
        "it", "'s", " ", "a", " ", "test", ",", " ", "isn", "'t", " ",
        "it", "?", " ", "123"]
    # a pattern that covers letters only: the rest become chunks too
    assert PreTokenizer(r"\p{L}+")(s) == [
        "it", "'", "s", " ", "a", " ", "test", ", ", "isn", "'", "t", " ",
        "it", "? 123"]
    # the mutation: findall alone loses text with both patterns
    assert "".join(regex.findall(r"('s|'t)|\p{L}+", s)) != s


@settings(max_examples=300, deadline=None)
@given(pattern=PATTERN_FAMILY, text=TEXTS)
def test_no_accepted_pattern_loses_text(pattern, text):
    tok = BPETokenizer.train(TRAIN_TEXT, 300, pattern=pattern,
                             special_tokens=())
    chunks = tok.pre_tokenize(text)
    assert "".join(chunks) == text
    assert tok.decode(tok.encode(text)) == text
    data = text.encode("utf-8", "surrogatepass")
    assert tok.decode_bytes(tok.encode_bytes(data)) == data
    # the chunks are the whole matches and the text between them, in order
    expected, end = [], 0
    for m in regex.finditer(pattern, text):
        expected += [text[end:m.start()], m.group(0)]
        end = m.end()
    expected.append(text[end:])
    assert [c for c in chunks if c] == [c for c in expected if c]


# -- the ASCII twin ----------------------------------------------------------
@pytest.mark.parametrize("pattern", PATTERNS)
def test_usual_patterns_have_a_twin(pattern):
    assert PreTokenizer(pattern).ascii_twin is not None


@settings(max_examples=400, deadline=None)
@given(pattern=st.sampled_from(PATTERNS) | PATTERN_FAMILY, text=ASCII_TEXTS)
def test_twin_cuts_ascii_text_as_regex_does(pattern, text):
    pre = PreTokenizer(pattern)
    assert pre(text) == without_twin(pattern)(text)


def test_twin_on_the_corpus(corpus):
    for pattern in PATTERNS:
        pre = PreTokenizer(pattern)
        assert pre.ascii_twin is not None and corpus.isascii()
        assert pre(corpus) == regex.findall(pattern, corpus)


@pytest.mark.parametrize("pattern", [
    r"\bword", r"(?i)abc", r"[[:alpha:]]+", r"(?i:\p{Lu})", "é+",
    r"(?P<x>a)(?P=x)", r"\X", r"(?<=\s+)a", r"a\Kb", r"[^]]", r"[a&&b]",
])
def test_twin_refuses_what_the_two_modules_read_differently(pattern):
    assert tk._ascii_twin(pattern, regex.compile(pattern)) is None


# -- the whole-chunk lookup --------------------------------------------------
def test_every_trained_token_rebuilds_itself(small):
    """Move 5 on a token's bytes gives the token back, so looking a chunk
    up whole (tiktoken's rule) changes no id."""
    for i in range(256 + len(small.merges)):
        chars = small.vocab[i].decode("latin-1")
        assert tk._merge_chars(chars, small._rank_of.get,
                               small._pair_of) == chr(i)


# -- tiktoken rank files -----------------------------------------------------
def test_save_tiktoken_round_trip(tmp_path, small, corpus):
    path = tmp_path / "small.tiktoken"
    small.save_tiktoken(path)
    ranks = load_tiktoken_bpe(str(path))  # tiktoken's own reader
    assert ranks == {small.vocab[i]: i for i in range(256 + len(
        small.merges))}
    back = BPETokenizer.from_tiktoken(path, small.pattern,
                                      dict(small.special_tokens))
    assert back.merges == small.merges and back.vocab == small.vocab
    assert back.byte_ids == tuple(range(256))
    enc = tiktoken.Encoding("t", pat_str=small.pattern, mergeable_ranks=ranks,
                            special_tokens=dict(small.special_tokens))
    text = corpus[:300_000]
    assert back.encode(text) == enc.encode_ordinary(text) == small.encode(
        text)
    docs = END_OF_TEXT.join([corpus[:5000], corpus[5000:9000]])
    assert back.encode(docs, allowed_special="all") == enc.encode(
        docs, allowed_special="all")
    back.save_tiktoken(tmp_path / "again.tiktoken")
    assert (tmp_path / "again.tiktoken").read_bytes() == path.read_bytes()


@pytest.fixture(scope="module")
def permuted(small, tmp_path_factory):
    path = permuted_file(tmp_path_factory.mktemp("ranks"), small)
    ranks = load_tiktoken_bpe(str(path))
    specials = {END_OF_TEXT: len(ranks) + 7}  # a gap, as in cl100k_base
    ours = BPETokenizer.from_tiktoken(path, GPT2_PATTERN, specials)
    theirs = tiktoken.Encoding("p", pat_str=GPT2_PATTERN,
                               mergeable_ranks=ranks,
                               special_tokens=specials)
    return path, ours, theirs


def test_permuted_bytes(permuted, small):
    path, ours, theirs = permuted
    order = gpt2_byte_order()
    assert ours.byte_ids == tuple(order[b] for b in range(256))
    assert ours.vocab[0] == b"!" and ours.vocab[order[0]] == b"\x00"
    assert len(ours.merges) == len(small.merges)
    assert ours.vocab_size == 256 + len(small.merges) + 8
    s = "Is't not enough? 我们 🙂\x00\xff"
    assert ours.encode(s) == theirs.encode_ordinary(s)
    assert ours.decode(ours.encode(s)) == s
    eot = ours.special_tokens[END_OF_TEXT]
    assert ours.encode("a" + END_OF_TEXT, allowed_special="all")[-1] == eot
    assert ours.decode([eot]) == END_OF_TEXT


# Code points unassigned in the Unicode version Python knows (14.0): the
# `regex` module and tiktoken's Rust regex ship newer, different Unicode
# tables, and may call such a character a letter or not; every assigned
# code point, lone surrogates included, is fair game.
ASSIGNED_CHAR = st.characters(exclude_categories=("Cn",))
ASSIGNED_TEXTS = st.lists(st.text(ASSIGNED_CHAR, max_size=10) | PIECES,
                          max_size=10).map("".join)


@settings(max_examples=400, deadline=None)
@given(text=ASSIGNED_TEXTS)
def test_tokens_equal_tiktoken_on_any_unicode(permuted, text):
    _, ours, theirs = permuted
    # tiktoken replaces lone surrogates before encoding; we keep them
    assert ours.encode(valid(text)) == theirs.encode_ordinary(text)
    assert ours.decode(ours.encode(text)) == text
    if valid(text) == text:
        assert ours.encode(text, allowed_special="all") == theirs.encode(
            text, allowed_special="all")


def test_save_load_keeps_byte_order_and_special_ids(tmp_path, permuted):
    _, ours, _ = permuted
    ours.save(tmp_path / "p.bpe")
    back = BPETokenizer.load(tmp_path / "p.bpe")
    assert back.byte_ids == ours.byte_ids and back.vocab == ours.vocab
    assert back.special_tokens == ours.special_tokens
    s = "Is't 我们 <|endoftext|>"
    assert back.encode(s, allowed_special="all") == ours.encode(
        s, allowed_special="all")


def test_version_1_files_still_load(tmp_path, small):
    small.save(tmp_path / "v2.bpe")
    lines = (tmp_path / "v2.bpe").read_text(encoding="utf-8").split("\n")
    assert json.loads(lines[1]).get("byte_ids") is None
    (tmp_path / "v1.bpe").write_text("\n".join(["transformer-bpe 1"]
                                               + lines[1:]), encoding="utf-8")
    back = BPETokenizer.load(tmp_path / "v1.bpe")
    assert back.vocab == small.vocab
    assert back.special_tokens == small.special_tokens


def test_merge_recovery_is_linear(small):
    """The work per token is move 5 on its own bytes: at most (n - 1)
    lookups in each of at most (n - 1) rounds for a token of n bytes,
    whatever the size of the vocabulary."""
    lookups = [0]
    merge_chars = tk._merge_chars

    def counting(s, rank_of, pair_of):
        def get(pair, default):
            lookups[0] += 1
            return rank_of(pair, default)
        return merge_chars(s, get, pair_of)

    tokens = [small.vocab[i] for i in range(256 + len(small.merges))]
    _, merges = tokenizer_files._recover_merges(tokens, counting)
    assert merges == small.merges
    assert lookups[0] <= sum((len(t) - 1) ** 2 for t in tokens[256:])
    # a naive search over earlier tokens would grow with the vocabulary
    assert lookups[0] < len(tokens) * max(map(len, tokens)) ** 2


@pytest.mark.parametrize("edit, message", [
    (lambda ls: ls[:10] + [b"not-base64! 10"] + ls[11:], "line 11"),
    (lambda ls: ls + [ls[300].split()[0] + b" %d" % len(ls)],
     "same bytes"),
    (lambda ls: ls[:300] + ls[301:], "ranks are not"),
    (lambda ls: [ls[300].split()[0] + b" 0"] + ls[1:300]
     + [ls[0].split()[0] + b" 300"] + ls[301:], "single bytes"),
    (lambda ls: ls + [base64.b64encode(b"x" * 2000) + b" %d" % len(ls)],
     "max_token_bytes"),
    (lambda ls: ls + [ls[300].split()[0] + b" 5"], "rank 5 given twice"),
    (lambda ls: [], "ranks 0-255"),
])
def test_from_tiktoken_rejects_bad_files(tmp_path, small, edit, message):
    small.save_tiktoken(tmp_path / "ok.tiktoken")
    lines = (tmp_path / "ok.tiktoken").read_bytes().splitlines()
    (tmp_path / "bad.tiktoken").write_bytes(b"\n".join(edit(lines)))
    with pytest.raises(ValueError, match=message):
        BPETokenizer.from_tiktoken(tmp_path / "bad.tiktoken", GPT2_PATTERN)


def test_from_tiktoken_rejects_a_token_that_is_not_a_merge(tmp_path):
    ranks = {bytes([b]): b for b in range(256)}
    ranks[b"abc"] = 256  # no "ab" or "bc": three bytes, not a pair
    write_ranks(tmp_path / "x.tiktoken", ranks)
    with pytest.raises(ValueError, match="rank 256"):
        BPETokenizer.from_tiktoken(tmp_path / "x.tiktoken", GPT2_PATTERN)
    with pytest.raises(ValueError, match="path"):
        BPETokenizer.from_tiktoken(tmp_path / "missing", GPT2_PATTERN)


def test_save_tiktoken_refuses_shared_bytes(tmp_path):
    # (a, bc) and (ab, c) both spell "abc": a rank file cannot hold both
    tok = BPETokenizer([(97, 98), (98, 99), (97, 257), (256, 99)],
                       special_tokens=())
    with pytest.raises(ValueError, match="both stand for"):
        tok.save_tiktoken(tmp_path / "x.tiktoken")


# -- hostile files -----------------------------------------------------------
def doubling_file(path, n=40):
    """n merge lines, each joining the previous token with itself: the
    last one would be 2**n bytes."""
    header = {"pattern": None, "merges": n, "special_tokens": []}
    lines = ["transformer-bpe 2", json.dumps(header), "97 97"]
    lines += [f"{256 + k} {256 + k}" for k in range(n - 1)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_load_refuses_self_doubling_merges_before_allocating(tmp_path):
    path = doubling_file(tmp_path / "hostile.bpe")
    assert path.stat().st_size < 600
    tracemalloc.start()
    start = time.perf_counter()
    with pytest.raises(ValueError, match="max_token_bytes"):
        BPETokenizer.load(path)
    elapsed = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1_000_000 and elapsed < 1.0
    # the same file is fine with a limit it fits (10 lines: 1,024 bytes)
    ok = BPETokenizer.load(doubling_file(tmp_path / "ok.bpe", 10))
    assert max(map(len, ok.vocab.values())) == 1024
    with pytest.raises(ValueError, match="merges: entry 40"):
        BPETokenizer([(97, 97)] + [(256 + k, 256 + k) for k in range(40)],
                     max_token_bytes=1 << 40)


# -- Hugging Face tokenizers --------------------------------------------------
def hf_of(tok, tmp_path):
    path = tmp_path / "tokenizer.json"
    tok.save_tokenizer_json(path)
    return PreTrainedTokenizerFast(tokenizer_file=str(path))


@pytest.fixture(scope="module")
def hf_small(small, tmp_path_factory):
    return hf_of(small, tmp_path_factory.mktemp("hf"))


# Valid text of assigned code points only: `tokenizers` (Oniguruma) and
# `regex` also carry different Unicode tables, so a character Unicode
# assigned after 14.0 (U+328B0, say) is a letter to one and not the other.
ASSIGNED_VALID_TEXTS = st.lists(
    st.text(st.characters(exclude_categories=("Cs", "Cn")), max_size=10)
    | PIECES, max_size=10).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=ASSIGNED_VALID_TEXTS)
def test_tokenizer_json_gives_the_same_ids(small, hf_small, text):
    ids = small.encode(text, allowed_special="all")
    assert hf_small(text)["input_ids"] == ids
    assert hf_small.decode(ids) == text


def test_tokenizer_json_on_the_corpus(small, hf_small, corpus):
    text = corpus[:200_000]
    assert hf_small(text)["input_ids"] == small.encode(text)


@pytest.mark.parametrize("pattern", [CL100K_PATTERN, r"\p{L}+", None])
def test_tokenizer_json_other_patterns(tmp_path, corpus, pattern):
    tok = BPETokenizer.train(corpus[:30_000] + " 我们 1234 ", 400,
                             pattern=pattern)
    hf = hf_of(tok, tmp_path)
    for text in [corpus[30_000:34_000], "It's 12345 我们\r\n\n  x  ",
                 "a<|endoftext|>b", "don'T WE'LL"]:
        assert hf(text)["input_ids"] == tok.encode(text,
                                                   allowed_special="all")


def test_tokenizer_json_keeps_byte_order(permuted, tmp_path):
    _, ours, _ = permuted
    hf = hf_of(ours, tmp_path)
    for text in ["Is't not enough? 我们 🙂", "\x00\x01 <|endoftext|>"]:
        assert hf(text)["input_ids"] == ours.encode(text,
                                                    allowed_special="all")
