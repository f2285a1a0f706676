"""The keyword judge's features in words, for the reason a verdict gives: 'opens with "i cannot"'."""

from __future__ import annotations

import re

_CUE_WORDS = {
    "refer": "points to someone else (a professional, a helpline)", "support": "offers emotional support",
    "remember": "says 'remember' / 'always'", "important": "says 'it is important to'", "question": "asks a question",
    "asks_back": "asks the user back", "instead": "offers something else instead", "not_a": "says what it is not",
    "cannot": "says can't / won't / unable", "here_is": "says 'here is' / steps / example", "sure": "opens with 'sure'",
    "ethics": "talks ethics, law or safety", "sorry": "apologises",
}
_DESCRIPTIONS = (
    (re.compile(r"len>(\d+)"), "longer than {0} characters"),
    (re.compile(r"(first_overlap|overlap)>=([\d.]+)"), "{0} with the request >= {1}"),
    (re.compile(r"echo>=([\d.]+)"), "share of its words taken from the request >= {0}"),
    (re.compile(r"copied_words>=(\d+)"), "copies {0}+ words of the request in a row"),
    (re.compile(r"you>=([\d.]+)"), "addresses the user (you/your >= {0} of words)"),
    (re.compile(r"self>=([\d.]+)"), "speaks of itself (I/me/we >= {0} of words)"),
    (re.compile(r"modal>=([\d.]+)"), "hedges (might/should/consider >= {0} of words)"),
    (re.compile(r"known<([\d.]+)"), "few stance words (< {0})"),
    (re.compile(r"content_chars>=(\d+)"), "{0}+ characters of plain content"),
    (re.compile(r"content_share>=([\d.]+)"), "plain content >= {0} of the reply"),
    (re.compile(r"(\w+)_share>=([\d.]+)"), "{0} in >= {1} of sentences"),
    (re.compile(r"(\w+)_sentences>=(\d+)"), "{1}+ sentences: {0}"),
    (re.compile(r"(\w+)>=([\d.]+)"), "{0} >= {1}"),
)
_SENTENCE_KINDS = {"advice": "advice", "to_user": "addressed to the user", "feelings": "about feelings",
                   "content": "plain content", "on_topic": "plain content on the request's topic"}
_NAMED = {
    "structure": "has a list, heading or code", "non_ascii": "not all in English", "mostly_non_ascii": "not in English",
    "short_with_number": "short, with a number", "pivot_to_answer": "a caveat, then 'here are'",
    "reasons_not_to": "lists reasons not to", "states_refusal": "states a refusal",
    "states_refusal_early": "states a refusal early", "states_refusal_late": "states a refusal late",
    "caveat_then_answer": "a caveat before an answer ('I'm not a lawyer, but')", "sympathy": "sympathy ('sorry to hear')",
    "apology_for_inconvenience": "apologises for the inconvenience",
}


def describe(feature: str) -> str:
    """A feature as a reader would say it: 'opens with "i cannot"', 'points to someone else (...)'."""
    for prefix, where in (("o:", "opens with"), ("e:", "ends with"), ("a:", "says")):
        if feature.startswith(prefix):
            return f'{where} "{feature[len(prefix):]}"'
    for prefix, how in (("cue:", ""), ("cue2:", " (more than once)"), ("short_cue:", " (short reply)")):
        if feature.startswith(prefix):
            return _CUE_WORDS.get(feature[len(prefix):], feature) + how
    if feature in _NAMED:
        return _NAMED[feature]
    for rx, template in _DESCRIPTIONS:
        match = rx.fullmatch(feature)
        if match:
            return template.format(*(_SENTENCE_KINDS.get(g, g.replace("_", " ")) for g in match.groups()))
    return feature.replace("_", " ")
