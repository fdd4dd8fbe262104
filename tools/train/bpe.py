"""Byte-level BPE in plain Python, compatible with Hugging Face tokenizer.json.

The tokenizer is GPT-2 style: text is split with the GPT-2 pre-tokenizer regex, each piece is
mapped byte by byte onto printable unicode characters (the ByteLevel alphabet), and merges are
applied lowest rank first. `encode` here must give exactly the ids that the Hugging Face
`tokenizers` libraries give for the tokenizer.json written by `to_tokenizer_json`;
check_tokenizer.mjs checks that against @huggingface/tokenizers.
"""

import heapq
import re
import unicodedata
from collections import Counter, defaultdict


def bytes_to_unicode():
    """GPT-2's byte -> printable character table (the ByteLevel alphabet)."""
    bs = list(range(ord('!'), ord('~') + 1)) + list(range(ord('¡'), ord('¬') + 1)) + list(range(ord('®'), ord('ÿ') + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


BYTE_TO_CHAR = bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


def _char_class(categories):
    """A regex character-class body matching every code point whose category starts with one of
    `categories` (Python's `re` has no \\p{L}/\\p{N})."""
    parts, start, prev = [], None, None
    for cp in range(0x110000):
        if unicodedata.category(chr(cp))[0] in categories:
            if start is None:
                start = cp
            prev = cp
        elif start is not None:
            parts.append((start, prev))
            start = None
    if start is not None:
        parts.append((start, prev))
    esc = lambda cp: '\\U%08x' % cp
    return ''.join(esc(a) if a == b else esc(a) + '-' + esc(b) for a, b in parts)


_L = _char_class('L')
_N = _char_class('N')
# The GPT-2 pattern the ByteLevel pre-tokenizer uses (use_regex: true), with \p{L} and \p{N} spelled out.
GPT2_PATTERN = re.compile(
    r"'s|'t|'re|'ve|'m|'ll|'d"
    rf"| ?[{_L}]+| ?[{_N}]+| ?[^\s{_L}{_N}]+"
    r"|\s+(?!\S)|\s+"
)


def pretokenize(text):
    """Split text like the ByteLevel pre-tokenizer: regex pieces, then bytes -> alphabet characters."""
    return [''.join(BYTE_TO_CHAR[b] for b in piece.encode('utf-8')) for piece in GPT2_PATTERN.findall(text)]


def train_bpe(texts, vocab_size, specials):
    """Learn merges from an iterable of texts (each pre-tokenized on its own).

    Ids: specials first (0, 1, ...), then the 256 byte characters in byte order, then one token per
    merge in the order learnt. Ties between equally frequent pairs go to the lexicographically
    smallest pair, so the result is deterministic.
    """
    word_counts = Counter()
    for t in texts:
        word_counts.update(pretokenize(t))
    words = [list(w) for w in word_counts]
    freqs = [word_counts[w] for w in word_counts]

    pair_counts = defaultdict(int)
    where = defaultdict(set)
    for i, w in enumerate(words):
        for p in zip(w, w[1:]):
            pair_counts[p] += freqs[i]
            where[p].add(i)
    heap = [(-c, p) for p, c in pair_counts.items()]
    heapq.heapify(heap)

    vocab = {s: i for i, s in enumerate(specials)}
    for b in range(256):
        vocab[BYTE_TO_CHAR[b]] = len(vocab)
    merges = []
    while len(vocab) < vocab_size and heap:
        negc, pair = heapq.heappop(heap)
        if pair_counts.get(pair, 0) != -negc or negc == 0:
            continue  # stale heap entry
        a, b = pair
        merged = a + b
        merges.append(pair)
        if merged not in vocab:  # two different merges can spell the same token
            vocab[merged] = len(vocab)
        touched = set()
        for i in list(where[pair]):
            w, f = words[i], freqs[i]
            for p in zip(w, w[1:]):
                pair_counts[p] -= f
                touched.add(p)
            out, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and w[j] == a and w[j + 1] == b:
                    out.append(merged)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            words[i] = out
            for p in zip(out, out[1:]):
                pair_counts[p] += f
                where[p].add(i)
                touched.add(p)
        del where[pair]
        pair_counts.pop(pair, None)
        for p in touched:
            c = pair_counts.get(p, 0)
            if c <= 0:
                pair_counts.pop(p, None)
            elif p != pair:
                heapq.heappush(heap, (-c, p))
    return vocab, merges


class BPETokenizer:
    def __init__(self, vocab, merges, bos_token, eos_token):
        self.vocab = vocab
        self.merges = merges
        self.ranks = {p: i for i, p in enumerate(merges)}
        self.id_to_token = {i: t for t, i in vocab.items()}
        self.bos_token, self.eos_token = bos_token, eos_token
        self.bos_id, self.eos_id = vocab[bos_token], vocab[eos_token]
        self.specials = {bos_token, eos_token}
        self._cache = {}

    def _bpe(self, piece):
        ids = self._cache.get(piece)
        if ids is not None:
            return ids
        w = list(piece)
        while len(w) > 1:
            best = min(zip(w, w[1:]), key=lambda p: self.ranks.get(p, 1 << 30))
            if best not in self.ranks:
                break
            a, b = best
            out, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and w[j] == a and w[j + 1] == b:
                    out.append(a + b)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            w = out
        ids = [self.vocab[t] for t in w]
        self._cache[piece] = ids
        return ids

    def encode(self, text, add_bos=False):
        """Ids for plain text (special-token strings in `text` are not recognised)."""
        ids = [self.bos_id] if add_bos else []
        for piece in pretokenize(text):
            ids.extend(self._bpe(piece))
        return ids

    def decode(self, ids, skip_special=True):
        toks = [self.id_to_token[i] for i in ids]
        if skip_special:
            toks = [t for t in toks if t not in self.specials]
        else:
            # keep specials as text, bytes for the rest
            parts = []
            for t in toks:
                parts.append(t if t in self.specials else bytes(CHAR_TO_BYTE[c] for c in t).decode('utf-8', 'replace'))
            return ''.join(parts)
        data = bytes(CHAR_TO_BYTE[c] for t in toks for c in t)
        return data.decode('utf-8', errors='replace')

    def to_tokenizer_json(self):
        """A Hugging Face tokenizer.json (BPE model, ByteLevel pre-tokenizer/decoder, BOS template)."""
        added = [
            {'id': self.vocab[t], 'content': t, 'single_word': False, 'lstrip': False, 'rstrip': False,
             'normalized': False, 'special': True}
            for t in (self.bos_token, self.eos_token)
        ]
        bos = self.bos_token
        return {
            'version': '1.0',
            'truncation': None,
            'padding': None,
            'added_tokens': added,
            'normalizer': None,
            'pre_tokenizer': {'type': 'ByteLevel', 'add_prefix_space': False, 'trim_offsets': True, 'use_regex': True},
            'post_processor': {
                'type': 'TemplateProcessing',
                'single': [{'SpecialToken': {'id': bos, 'type_id': 0}}, {'Sequence': {'id': 'A', 'type_id': 0}}],
                'pair': [
                    {'SpecialToken': {'id': bos, 'type_id': 0}}, {'Sequence': {'id': 'A', 'type_id': 0}},
                    {'SpecialToken': {'id': bos, 'type_id': 1}}, {'Sequence': {'id': 'B', 'type_id': 1}},
                ],
                'special_tokens': {bos: {'id': bos, 'ids': [self.bos_id], 'tokens': [bos]}},
            },
            'decoder': {'type': 'ByteLevel', 'add_prefix_space': True, 'trim_offsets': True, 'use_regex': True},
            'model': {
                'type': 'BPE',
                'dropout': None,
                'unk_token': None,
                'continuing_subword_prefix': None,
                'end_of_word_suffix': None,
                'fuse_unk': False,
                'byte_fallback': False,
                'ignore_merges': False,
                'vocab': self.vocab,
                'merges': [[a, b] for a, b in self.merges],
            },
        }
