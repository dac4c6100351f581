"""Response analysis: did a model's response use the memory objects injected into its context?

The rest of the service imports ``analysis.api`` only. Behind it, one module per stage:
``words`` (vocabulary, stemmer) and ``text`` (one spelling per quantity, date and time; the
quoted question; retraction cues; the concept lexicon) normalise; ``tokens`` tokenises; ``prepare`` prepares a response and a memory;
``lexical`` scores them; ``model`` (fitted) and ``embedding`` (optional) are scorers on top;
``evaluation`` measures a scorer on the labelled sets in ``data/``. Pure: no Django import, and
nothing here imports ``feedback``.
"""
