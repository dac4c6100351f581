"""Response analysis: did a model's response use the memory objects injected into its context?

The rest of the service imports ``analysis.api`` only. Behind it, one module per stage:
``words`` (vocabulary, stemmer); ``normalise``, the first stage, runs ``text`` (one spelling per
quantity, date and time; the quoted question; retraction cues) then ``concepts`` (synonyms, the
concept lexicon, the WordNet table); ``tokens`` tokenises; ``prepare`` prepares a response and a
memory; ``types`` holds the verdicts and the scorer protocol; ``lexical`` scores; ``model``
(fitted) and ``embedding`` (optional) are scorers on top of it; ``evaluation`` measures a scorer
on the labelled sets in ``data/``. Pure: no Django import, and nothing here imports ``feedback``.
"""
