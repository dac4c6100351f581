"""Round 4 (docs/DETECTION.md): the concept lexicon of the response analysis (analysis/data/
detection_lexicon.txt), the WordNet-derived related words (analysis/data/detection_wordnet.txt),
the date, clock and duration alternatives, and how the fitted scorer treats them. Exact values:
a change to the lexicon or the model shows up here."""

from __future__ import annotations

import pytest

from analysis.api import REFERENCED, UNUSED, DetectionInput, analyse
from analysis.concepts import LEXICON_FILE, WORDNET_FILE, related_table
from analysis.lexical import LexicalScorer
from analysis.model import THRESHOLD, VETO_CAP, FittedScorer
from analysis.normalise import normalise

LEXICAL = LexicalScorer()
PLAIN = LexicalScorer(concepts=False, related_credit=0, hypernym_credit=0, hyponym_credit=0)
FITTED = FittedScorer()


def fitted(memory: str, response: str):
    (det,) = analyse(response, [DetectionInput("m", memory)], FITTED)
    return det


@pytest.mark.parametrize(
    ("memory", "response", "with_lexicon", "without"),
    [
        # "doesn't eat meat" is written "vegetarian": the paraphrase now matches
        ("User is vegetarian.", "Since you don't eat meat, here is a lentil curry.", 0.8094, 0.0),
        ("Alice reports to Dana.", "Dana, Alice's manager, has to approve it.", 1.0, 0.5031),
        (
            "User works from home on Fridays.",
            "Since you're remote on Fridays, the courier will leave the parcel with you.",
            0.9453,
            0.1935,
        ),
        (
            "The CI timeout is 2 hours.",
            "The job is killed after 120 minutes, your CI limit.",
            0.5811,
            0.0407,
        ),
        (
            "User's passport expires on 2 August 2027.",
            "With your passport valid until 2027-08-02, the six-month rule is satisfied.",
            0.6,
            0.2345,
        ),
        (
            "User's bedtime for the kids is 19:30.",
            "Lights out at half past seven, as usual for your kids' bedtime.",
            0.6976,
            0.2122,
        ),
        (
            "The sprint review happens every other week.",
            "Your sprint reviews are biweekly, so book the room for alternate Thursdays.",
            0.6988,
            0.4933,
        ),
    ],
)
def test_paraphrases_match_through_the_lexicon(memory, response, with_lexicon, without):
    score, reason = LEXICAL.score(memory, response)
    assert score == pytest.approx(with_lexicon, abs=1e-4), reason
    assert score >= LEXICAL.threshold
    assert PLAIN.score(memory, response)[0] == pytest.approx(without, abs=1e-4)


def test_paraphrases_the_fitted_scorer_now_refers():
    for memory, response, expected in (
        (
            "The CI timeout is 2 hours.",
            "The job is killed after 120 minutes, your CI limit.",
            0.7039,
        ),
        (
            "User's passport expires on 2 August 2027.",
            "With your passport valid until 2027-08-02, the six-month rule is satisfied.",
            0.8808,
        ),
        (
            "User's bedtime for the kids is 19:30.",
            "Lights out at half past seven, as usual for your kids' bedtime.",
            0.8903,
        ),
        (
            "User works from home on Fridays.",
            "Since you're remote on Fridays, the courier will leave the parcel with you.",
            0.8154,
        ),
    ):
        det = fitted(memory, response)
        assert det.signal_type == REFERENCED and det.score == pytest.approx(expected, abs=1e-4)


def test_a_wordnet_synonym_counts_with_partial_credit():
    memory, response = (
        "The workshop will commence on Monday.",
        "The workshop starts Monday in room B.",
    )
    score, reason = LEXICAL.score(memory, response)
    assert score == pytest.approx(0.5270, abs=1e-4)
    assert "commenc" in reason  # found as "starts" (WordNet: commence = start = begin)
    off = LexicalScorer(related_credit=0, hypernym_credit=0, hyponym_credit=0)
    assert off.score(memory, response)[0] == pytest.approx(0.4174, abs=1e-4)
    assert ("begin", 0) in related_table()["commenc"]


def test_hard_negatives_stay_unused():
    tabs = (
        "User prefers tabs over spaces for indentation.",
        "Most browsers reopen the last closed tab.",
    )
    assert LEXICAL.score(*tabs)[0] < LEXICAL.threshold
    assert fitted(*tabs).signal_type == UNUSED
    poodle = ("User's dog is a poodle.", "Your dog will need grooming every six weeks.")
    # "dog" is the memory's own term, not also evidence of "poodle" (WordNet: poodle is a dog)
    assert LEXICAL.score(*poodle)[0] == pytest.approx(0.0786, abs=1e-4)
    assert fitted(*poodle).signal_type == UNUSED
    # Same wording, another system: the lexical scorer is fooled, the fitted one is not (the
    # memory's name Loki is missing and the window names Mimir instead).
    memory = "Logs are shipped to Loki and retained for 14 days."
    response = (
        "Metrics are shipped to Mimir and retained for 14 days, so last month's CPU graph is gone."
    )
    assert LEXICAL.score(memory, response)[0] == pytest.approx(0.85, abs=1e-4)
    (f,) = LEXICAL.features_many([memory], response)
    assert f.name_missing and f.name_swap
    det = fitted(memory, response)
    assert det.signal_type == UNUSED and det.score == pytest.approx(0.6245, abs=1e-4)
    assert det.score < THRESHOLD


def test_a_contradiction_is_still_vetoed():
    memory, response = (
        "User is vegetarian.",
        "You are not vegetarian anymore, so here is a steak recipe.",
    )
    score, reason = LEXICAL.score(memory, response)
    assert score == pytest.approx(0.2024, abs=1e-4) and "contradicts" in reason
    det = fitted(memory, response)
    assert det.signal_type == UNUSED and det.score <= VETO_CAP <= 0.05  # the cap is a ceiling
    assert "contradicts" in det.reason


def test_concepts_are_written_after_their_phrase_and_keep_or_absorb_the_negation():
    assert normalise("He doesn't eat meat.") == "He doesn't eat meat \ue007vegetarian ."
    assert normalise("Dana reports to Sam every other week.") == (
        "Dana reports to \ue004manager  Sam every other week \ue006everyfortnightly ."
    )
    assert normalise("Retained for 2 hours.") == "Retained for 2 hours \ue004120 \ue000minutes ."
    assert normalise("Due 2 August 2027.") == "Due 2 August 2027 \ue0062027-08-02 ."
    assert normalise("At half past seven.") == "At half past seven \ue00607:30 ."
    assert normalise("At half past seven.", concepts=False) == "At half past seven."
    # "doesn't eat meat" holds its negation: "vegetarian" is asserted; "doesn't report to"
    # does not: "manager" stays under the negation, so the contradiction check still sees it.
    (veg,) = LEXICAL.features_many(
        ["User doesn't eat meat."], "Here are vegetarian options for you."
    )
    assert not veg.contradiction and veg.score >= LEXICAL.threshold
    (boss,) = LEXICAL.features_many(["Alice's manager is Dana."], "Alice does not report to Dana.")
    assert boss.contradiction


def test_an_unused_alternative_is_not_a_missing_term():
    """A verbatim use scores as it did without the lexicon: the concept written after the
    phrase counts neither as matched nor as missing when the phrase itself is there."""
    memory, response = "Alice reports to Dana.", "Alice reports to Dana, so ask Dana first."
    assert LEXICAL.score(memory, response)[0] == PLAIN.score(memory, response)[0]


def test_the_resources_ship_inside_the_package_with_wordnets_licence():
    assert LEXICON_FILE.parent.name == "data" and LEXICON_FILE.parent.parent.name == "analysis"
    head = WORDNET_FILE.read_text(encoding="utf-8")[:3000]
    assert "WordNet 3.0 Copyright 2006 by Princeton University" in head
    assert len(related_table()) > 15000  # stems of about 22,000 WordNet words


def test_spelled_hundreds_and_the_scope_of_no():
    assert normalise("four hundred dollars") == "four hundred \ue004400  dollars"
    # "no" denies its noun phrase only: "no lift to your flat" does not deny the flat. (A use:
    # "fifth" and "five" are both 5, and WordNet has floor = storey.)
    (f,) = LEXICAL.features_many(
        ["User's apartment is on the fifth floor with no elevator."],
        "Carrying a mattress up five storeys with no lift to your flat is tough.",
    )
    assert not f.contradiction and f.score == pytest.approx(0.5543, abs=1e-4)
    assert "flat, 5, elevat" in f.reason  # "lift" is a WordNet synonym of "elevator"


def test_web_and_worker_processes_load_the_tables_before_the_first_analysis(monkeypatch):
    from analysis import api as detection
    from rms import gunicorn_conf
    from taskruns import tasks

    related_table.cache_clear()
    detection._frequencies.cache_clear()
    detection.warm()
    assert related_table.cache_info().currsize == 1
    assert detection._frequencies.cache_info().currsize == 1

    calls = []
    monkeypatch.setattr(detection, "warm", lambda: calls.append("warm"))
    tasks._warm_detection()  # celery's worker_init

    class Worker:
        class log:
            @staticmethod
            def exception(message):
                calls.append(message)

    gunicorn_conf.post_worker_init(Worker())
    assert calls == ["warm", "warm"]

    def broken():
        raise OSError("no table")

    monkeypatch.setattr(detection, "warm", broken)
    tasks._warm_detection()  # logged, never raised: a worker still starts
    gunicorn_conf.post_worker_init(Worker())
    assert calls[-1] == "could not load the response analyser's tables"


# --- round 6: closed-class swaps, spelled hundreds, metric and second units ----------------------


@pytest.mark.parametrize(
    ("memory", "response", "swap"),
    [
        # another member of the memory's class, none of its own: a different slot value
        ("User's son takes violin lessons.", "Your son's viola lessons are on Saturdays.", True),
        ("The staging DB has 8 GB.", "The production DB has 8 GB of RAM.", True),
        (
            "The rate limit is 600 requests per minute.",
            "At 600 requests per hour it throttles.",
            True,
        ),
        ("User's mother lives in Porto.", "Your brother in Porto could help.", True),
        # a familiar form of the same member, or the memory's own member among others: no swap
        ("User's mother lives in Porto.", "Your mum in Porto could help.", False),
        ("The staging VM has 8 GB.", "The pre-prod VM has 8 GB of memory.", False),
        ("User swims on Mondays and Fridays.", "Swim on Monday; Tuesday is rest.", False),
        ("The plan is billed monthly.", "At 20 euros a month, the plan is cheap.", False),
    ],
)
def test_a_closed_class_swap_is_flagged(memory, response, swap):
    (f,) = LEXICAL.features_many([memory], response)
    assert f.class_swap is swap


def test_a_class_swap_lowers_the_fitted_score():
    memory = "User's son takes violin lessons on Saturdays."
    same = fitted(memory, "Your son's violin lessons are on Saturdays, so pack the rosin.")
    other = fitted(memory, "Your son's viola lessons are on Saturdays, so pack the rosin.")
    assert same.signal_type == REFERENCED and other.signal_type == UNUSED
    assert same.score == pytest.approx(0.8327, abs=1e-4)
    assert other.score == pytest.approx(0.3414, abs=1e-4)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("eighteen hundred and fifty dollars", "1850 dollars"),
        ("one hundred forty-two beats", "142 beats"),
        ("a hundred and twenty people", "120 people"),
        ("19 hundred", "1900"),
    ],
)
def test_spelled_hundreds_are_one_number(text, expected):
    assert normalise(text, False) == expected


@pytest.mark.parametrize(
    ("text", "alternative"),
    [
        ("3200 grams", "3.2 kg"),
        ("weighed 3.2 kg", "3200 grams"),
        ("1500 metres", "1.5 km"),
        ("250 ml", "0.25 liters"),
        ("5 kilos", "5000 grams"),
        ("300 seconds", "5 minutes"),
        ("five minutes", "300 seconds"),
    ],
)
def test_metric_and_second_quantities_read_in_the_other_unit(text, alternative):
    written = normalise(text, True)
    plain = "".join(c if ord(c) < 0xE000 or ord(c) > 0xF8FF else "" for c in written)
    assert alternative in " ".join(plain.split())


def test_a_quantity_written_in_the_other_unit_is_referenced():
    memory = "User's baby weighed 3.2 kg at birth."
    response = "Your baby's birth weight of 3200 grams is in the typical range."
    det = fitted(memory, response)
    assert det.signal_type == REFERENCED and det.score == pytest.approx(0.8276, abs=1e-4)
    # without the conversion, "3200 grams" shares nothing distinctive with "3.2 kg"
    assert PLAIN.score(memory, response)[0] < 0.1
