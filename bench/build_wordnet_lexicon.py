"""Derive the compact related-word table analysis/data/detection_wordnet.txt from WordNet 3.0.

    apt-get install wordnet-base          # Princeton WordNet 3.0 database, /usr/share/wordnet
    .venv/bin/python bench/build_wordnet_lexicon.py [--dict /usr/share/wordnet] [--min-zipf 3.0]

Run only to regenerate the shipped file; the service never reads WordNet itself (the table ships
inside the package and is loaded once by analysis/lexical.py). For each single-word lemma
common enough in English (wordfreq Zipf >= --min-zipf), its most frequent sense in each part of
speech that has tagged senses (at most --senses senses per part of speech) gives:

  S  the other single-word lemmas of that synset, and of its "similar to" adjective synsets
  H  the lemmas of its direct hypernyms (nouns and verbs)
  D  the lemmas of its direct hyponyms (nouns and verbs)

Only related words that are themselves common enough are kept. WordNet's licence (permissive;
it asks that the copyright notice go with every copy) is written at the head of the file.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import wordfreq

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "analysis" / "data" / "detection_wordnet.txt"
POS = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}

NOTICE = """\
# Derived from WordNet 3.0 by bench/build_wordnet_lexicon.py; do not edit by hand.
# Format: word<TAB>synonyms<TAB>hypernyms<TAB>hyponyms (each list space-separated)
#
# WordNet 3.0 Copyright 2006 by Princeton University. All rights reserved.
# Permission to use, copy, modify and distribute this software and database and its
# documentation for any purpose and without fee or royalty is hereby granted, provided that you
# agree to comply with the following copyright notice and statements, including the
# disclaimer, and that the same appear on ALL copies of the software, database and
# documentation, including modifications that you make for internal use or for distribution.
# THIS SOFTWARE AND DATABASE IS PROVIDED "AS IS" AND PRINCETON UNIVERSITY MAKES NO
# REPRESENTATIONS OR WARRANTIES, EXPRESS OR IMPLIED. BY WAY OF EXAMPLE, BUT NOT LIMITATION,
# PRINCETON UNIVERSITY MAKES NO REPRESENTATIONS OR WARRANTIES OF MERCHANTABILITY OR FITNESS FOR
# ANY PARTICULAR PURPOSE OR THAT THE USE OF THE LICENSED SOFTWARE, DATABASE OR DOCUMENTATION
# WILL NOT INFRINGE ANY THIRD PARTY PATENTS, COPYRIGHTS, TRADEMARKS OR OTHER RIGHTS.
# The name of Princeton University or Princeton may not be used in advertising or publicity
# pertaining to distribution of the software and/or database. Title to copyright in this
# software, database and any associated documentation shall at all times remain with
# Princeton University and LICENSEE agrees to preserve same.
"""


def read_data(path: Path) -> dict[str, tuple[list[str], list[tuple[str, str, str]]]]:
    """offset -> (lemmas, pointers (symbol, offset, pos))."""
    out = {}
    for line in path.read_text(encoding="latin-1").splitlines():
        if line.startswith("  "):
            continue
        parts = line.split(" | ", 1)[0].split()
        offset, n_words = parts[0], int(parts[3], 16)
        words = [parts[4 + 2 * i].lower() for i in range(n_words)]
        i = 4 + 2 * n_words
        n_ptr = int(parts[i])
        ptrs = []
        for j in range(n_ptr):
            sym, off, pos = parts[i + 1 + 4 * j : i + 4 + 4 * j]
            ptrs.append((sym, off, "a" if pos == "s" else pos))
        out[offset] = (words, ptrs)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dict", type=Path, default=Path("/usr/share/wordnet"))
    ap.add_argument("--min-zipf", type=float, default=3.0)
    ap.add_argument("--senses", type=int, default=1)
    ap.add_argument(
        "--untagged",
        action="store_true",
        help="also lemmas none of whose senses is sense-tagged (rarer words: cilantro); their "
        "first sense is taken",
    )
    args = ap.parse_args()

    def common(word: str) -> bool:
        return word.isalpha() and wordfreq.zipf_frequency(word, "en") >= args.min_zipf

    data = {p: read_data(args.dict / f"data.{name}") for p, name in POS.items()}
    syn: dict[str, set[str]] = {}
    hyp: dict[str, set[str]] = {}
    down: dict[str, set[str]] = {}
    for p, name in POS.items():
        for line in (args.dict / f"index.{name}").read_text(encoding="latin-1").splitlines():
            if line.startswith("  "):
                continue
            parts = line.split()
            lemma, n_senses, n_ptr = parts[0], int(parts[2]), int(parts[3])
            tagged = int(parts[5 + n_ptr])
            if not common(lemma) or not (tagged or args.untagged):
                continue
            offsets = parts[6 + n_ptr : 6 + n_ptr + n_senses][: args.senses]
            for off in offsets:
                words, ptrs = data[p][off]
                s = syn.setdefault(lemma, set())
                h = hyp.setdefault(lemma, set())
                d = down.setdefault(lemma, set())
                s.update(w for w in words if w != lemma and common(w))
                for sym, o2, p2 in ptrs:
                    if sym == "&" and p2 == "a":
                        s.update(w for w in data[p2][o2][0] if w != lemma and common(w))
                    elif sym in ("@", "~") and p2 in ("n", "v"):
                        (h if sym == "@" else d).update(
                            w for w in data[p2][o2][0] if w != lemma and common(w)
                        )
    lines = []
    for lemma in sorted(syn):
        s = sorted(syn[lemma])
        h = sorted(hyp.get(lemma, set()) - syn[lemma])
        d = sorted(down.get(lemma, set()) - syn[lemma] - set(h))
        if s or h or d:
            lines.append(f"{lemma}\t{' '.join(s)}\t{' '.join(h)}\t{' '.join(d)}")
    OUT.write_text(NOTICE + "\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(lines)} words, {OUT.stat().st_size} bytes")


if __name__ == "__main__":
    main()
