"""The names a namespace's retrieval profile may hold (SPEC §12), read by the namespace API that
stores them and by ``feedback.retrieval`` that scores with them. Pure: no Django import."""

from __future__ import annotations

#: The profile's weights: SPEC §12's three, then confidence and effective salience (SPEC §1).
WEIGHT_NAMES = ("similarity", "hotness", "utility", "confidence", "salience")
#: The profile's eligibility rules, stored beside the weights.
RULE_NAMES = ("confidence_floor", "conditions")
#: How CONDITIONAL objects are treated: only a TRUE condition is eligible ("met"); FALSE and
#: EXPIRED are not, UNKNOWN is ("not_refuted"); the condition is not looked at ("any").
CONDITIONS = ("met", "not_refuted", "any")
