"""Backchannels: what a listener says to show they are following ("mm-hmm", "okay", "right"),
which must not end the agent's answer. Pure text rules on the transcript of the sound that
paused the agent.
"""

from __future__ import annotations

from state_machine.similarity import is_hesitation, normalize_words, spoken_words

# Phrases, longest first within each start word, matched word by word. Whisper writes the
# same sounds many ways ("Mm-hmm.", "Mhm.", "Uh huh", "Hmm."), and a laugh as "Ha ha.".
_PHRASES: tuple[tuple[str, ...], ...] = tuple(
    tuple(p.split())
    for p in (
        "mm hmm",
        "mm hm",
        "mhm",
        "mmhmm",
        "mm",
        "mmm",
        "hmm",
        "hm",
        "uh huh",
        "uh",
        "um",
        "huh",
        "ah",
        "oh",
        "aha",
        "okay",
        "ok",
        "right",
        "all right",
        "alright",
        "yeah",
        "yes",
        "yep",
        "yup",
        "sure",
        "i see",
        "got it",
        "cool",
        "nice",
        "great",
        "wow",
        "true",
        "exactly",
        "indeed",
        "thanks",
        "thank you",
        "ha",
        "haha",
        "hahaha",
        "heh",
        "oh okay",
        "i know",
        "of course",
        "makes sense",
        "that makes sense",
        "good",
        "fine",
        "uh yeah",
        "really",
        "oh really",
        "oh wow",
        "absolutely",
        "definitely",
        "totally",
        "that's right",
        "that's true",
        "fair enough",
        "interesting",
        "for sure",
    )
)
_PHRASE_SET = frozenset(_PHRASES)
_LONGEST_PHRASE = max(map(len, _PHRASES))
_BY_FIRST: dict[str, list[tuple[str, ...]]] = {}
for _p in sorted(_PHRASES, key=len, reverse=True):
    _BY_FIRST.setdefault(_p[0], []).append(_p)

MAX_BACKCHANNEL_WORDS = 4
"""Longer than this, it is something said to the agent, even in backchannel words."""


def _phrase_at(words: list[str], i: int) -> tuple[str, ...] | None:
    """The longest backchannel phrase that `words` hold from index `i`, if any."""
    return next((p for p in _BY_FIRST.get(words[i], ()) if tuple(words[i : i + len(p)]) == p), None)


def other_words(transcript: str) -> int:
    """How many of the transcript's words are not part of a backchannel phrase."""
    words = normalize_words(spoken_words(transcript))
    other = i = 0
    while i < len(words):
        match = _phrase_at(words, i)
        if match is None:
            other += 1
            i += 1
        else:
            i += len(match)
    return other


def is_backchannel(transcript: str) -> bool:
    """True when the transcript has words and every one of them belongs to a backchannel
    phrase ("Mm-hmm.", "Okay, right.", "Yeah yeah."), or all are hums, however many (a laugh,
    "Mm-mm, mm-mm, mm-mm": `HUMS`), or one word said over and over (`said_over_and_over`).
    No words at all (a cough, "[laughs]") is not a
    backchannel but no speech: the caller treats both as a non-interruption."""
    words = normalize_words(spoken_words(transcript))
    if words and (all(w in HUMS for w in words) or said_over_and_over(words)):
        return True
    return 0 < len(words) <= MAX_BACKCHANNEL_WORDS and other_words(transcript) == 0


def said_over_and_over(words: list[str]) -> bool:
    """One word, said two or more times and no other: how the STT writes a laugh or a hum it
    took for a word (through Opus, Whisper tiny.en wrote espeak-ng's "ha ha ha" as "Far, far,
    far", "Bye, bye, bye." and "Five, five, five"). Not when the word is a cue ("No, no, no"
    and "Wait, wait" are said to stop the agent), a backchannel's (those count as phrases:
    five "yeah"s are someone impatient to speak) or a function word ("so, so" is the
    speaker going on)."""
    return len(words) >= 2 and len(set(words)) == 1 and words[0] not in _SAID_AGAIN_AS_WORDS


# Words that ask the agent to stop: a reaction to its answer may open with one ("Wait, ...",
# "No, I meant ...", "Sorry, ..."), and each is an interruption cue.
STOP_CUES = frozenset(
    {
        "stop",
        "wait",
        "no",
        "nope",
        "hold",
        "hang",
        "sorry",
        "excuse",
        "pardon",
        "actually",
        "enough",
        "pause",
        "cancel",
    }
)
# Words that make even a one- or two-word sound an interruption ("Stop.", "Hold on.", "No.",
# "Why?"): the stop cues, and words that ask for something else or question what was said.
# A short sound without one is more often the STT's reading of a hum: through LiveKit,
# Whisper tiny.en heard a synthesized "mm hmm" as "and remember", "and Emma" and "and then
# the", and other hums as "term", "Amen", "That."; none of them asks to stop.
INTERRUPTION_CUES = STOP_CUES | frozenset(
    {
        "repeat",
        "again",
        "back",
        "slower",
        "louder",
        "quiet",
        "shush",
        "what",
        "why",
        "how",
        "who",
        "where",
        "when",
        "which",
        "but",
        "not",
        "don't",
    }
)
# Words that carry nothing on their own: a sound transcribed as only these ("and then the",
# "for the", "so, so") is the STT's reading of a hum or a fragment, not something said.
FUNCTION_WORDS = frozenset(
    {
        "a",
        "an",
        "the",
        "and",
        "or",
        "so",
        "then",
        "that",
        "this",
        "for",
        "of",
        "to",
        "in",
        "on",
        "at",
        "it",
        "is",
        "i",
        "i'm",
        "you",
        "we",
        "he",
        "she",
        "they",
        "be",
        "uh",
        "um",
        "er",
        "well",
        "like",
        "just",
        "there",
        "if",
    }
)
_SAID_AGAIN_AS_WORDS = INTERRUPTION_CUES | FUNCTION_WORDS | frozenset(_BY_FIRST)
SHORT_WORDS = 2
"""A sound of at most this many words interrupts only with a cue word or as a question."""
CONTENT_WORDS = 2
"""Words that are not FUNCTION_WORDS a cue-less sound needs to interrupt: Whisper tiny.en
heard Piper's "mm hmm" as "and then love." (one content word), a real interruption without a
cue ("Tell me about Lisbon instead") has more."""
# Sounds, not words: any number of them is a hum or a laugh ("Mm-mm, mm-mm, mm-mm" is how
# Whisper wrote espeak-ng's "mm hmm"), never something said to the agent.
HUMS = frozenset(
    {
        "mm",
        "mmm",
        "hmm",
        "hm",
        "mhm",
        "mmhmm",
        "uh",
        "um",
        "huh",
        "ah",
        "oh",
        "ha",
        "haha",
        "hahaha",
        "heh",
    }
)


def interrupts(transcript: str) -> bool:
    """The sound that paused the agent said something to it: words that are not a
    backchannel nor only hums, with an interruption cue ("Stop.", "Wait, what?"), an
    acknowledgement going on with a conjunction ("Right, and", "Okay so"), or three or
    more with at least CONTENT_WORDS that are neither function words nor hums ("A-ha-ha." is
    a laugh) before the acknowledgement they may end with ("I hope, yeah." has one), or a
    question ("Tokyo?")."""
    words = normalize_words(spoken_words(transcript))
    if not words or is_backchannel(transcript):
        return False
    if any(w in INTERRUPTION_CUES for w in words) or _acknowledges_and_goes_on(words):
        return True
    if not any(map(_is_content, words)):
        return False
    if transcript.rstrip().endswith("?"):
        return True
    own = sum(map(_is_content, _before_trailing_phrases(words) or words))
    return len(words) > SHORT_WORDS and own >= CONTENT_WORDS


def _is_content(word: str) -> bool:
    return word not in FUNCTION_WORDS and word not in HUMS


# Words that carry an acknowledgement on into a sentence of the speaker's own.
CONJUNCTIONS = frozenset({"and", "but", "so", "or"})


def _before_trailing_phrases(words: list[str]) -> list[str]:
    """`words` without the backchannel phrases they end with (none left: all of them were):
    "..., yeah", "..., okay, okay" tag an acknowledgement onto what came before and say
    nothing to the agent. Through Opus, Whisper tiny.en wrote Piper's "uh huh, yeah" as "I
    hope, yeah." and "okay okay" as "We're okay, okay.": one word of their own each."""
    end = len(words)
    while end > 0:
        tail = next(
            (
                n
                for n in range(min(end, _LONGEST_PHRASE), 0, -1)
                if tuple(words[end - n : end]) in _PHRASE_SET
            ),
            None,
        )
        if tail is None:
            break
        end -= tail
    return words[:end]


def _acknowledges_and_goes_on(words: list[str]) -> bool:
    """ "Right, and ...", "Okay so ...": a backchannel's phrase, then a conjunction. A backchannel
    ends where it began; one that goes on with "and" is the user taking the turn, heard before
    the words it goes on to (through Opus, Whisper tiny.en wrote "right and" 0.1-0.2 s before
    "right and what")."""
    opening = _phrase_at(words, 0)
    if opening is None or all(map(is_hesitation, opening)):
        return False
    return len(words) > len(opening) and words[len(opening)] in CONJUNCTIONS


def asks_to_stop(transcript: str) -> bool:
    """The words hold a stop cue ("Wait", "No", "Sorry"): said to stop the agent, however
    little of the sound has been heard."""
    return any(w in STOP_CUES for w in normalize_words(spoken_words(transcript)))


def reacts(transcript: str) -> bool:
    """The words answer the agent rather than go on with the speaker's own sentence: they
    open with a stop cue or an acknowledgement ("Okay, and what about tomorrow?"), a
    backchannel phrase other than a hesitation ("uh", "um": the speaker goes on with their
    own sentence)."""
    words = normalize_words(spoken_words(transcript))
    if not words or words[0] in STOP_CUES:
        return bool(words)
    opening = _phrase_at(words, 0)
    return opening is not None and not all(map(is_hesitation, opening))
