"""The held-out half of the turn-taking corpus (`voxroom bench --corpus turns --split
held-out`): sentences, pause lengths, fillers, backchannels, interruptions and voices that no
rule or setting of voxroom was tuned on, to tell whether the figures of the tuning half
(bench/turn_corpus.py) hold on speech the agent has never heard. Change nothing here to make
a figure better: that would tune on it. New items go in the tuning half.

The voices are espeak-ng variants that no other corpus of the bench uses, and Piper's bundled
voice (the only one installed) saying new sentences. Each kind starts at a different voice.
"""

from __future__ import annotations

from bench.turn_corpus import COUGH, LAUGH, TurnSet

HELD_OUT_VOICES = (
    "espeak-en-us+m3",
    "espeak-en-gb-x-gbclan+f1",
    "piper-joe",
    "espeak-en-us+f5",
    "espeak-en-gb+m4",
    "espeak-en-gb-x-gbclan",
)

# (question, the scripted answer)
HELD_OUT_QUESTIONS: tuple[tuple[str, str], ...] = (
    ("Which planet is closest to the sun?", "Mercury is the closest planet to the sun."),
    ("How many ounces are in a pound?", "There are sixteen ounces in a pound."),
    ("Who invented the telephone?", "Alexander Graham Bell is usually credited with it."),
    ("Why do onions make you cry?", "Cutting an onion releases a gas that stings the eyes."),
    ("When does the next bus leave?", "I cannot see the timetable, so please check the stop."),
    ("What is a good name for a puppy?", "Biscuit is a friendly name for a puppy."),
    ("Can you translate good morning into French?", "Good morning in French is bonjour."),
    ("Where can I park near the hospital?", "Most hospitals have a car park by the entrance."),
    ("How do I fix a flat bike tyre?", "Take the tube out, find the hole, and patch it."),
    ("What is the population of Canada?", "Canada has about forty million people."),
)
# (words before the pause, pause in seconds, words after it, the scripted answer): pause
# lengths the tuning half does not have, here and in the fillers.
HELD_OUT_PAUSED: tuple[tuple[str, float, str, str], ...] = (
    (
        "Can you tell me",
        0.75,
        "how to cook rice properly?",
        "Rinse it, then simmer one cup in two cups of water.",
    ),
    (
        "I would like to find out",
        0.55,
        "when the library opens tomorrow.",
        "Most libraries open at nine in the morning.",
    ),
    (
        "What is the quickest way",
        0.95,
        "to get to the city centre?",
        "The tram is the quickest way to the centre.",
    ),
    (
        "Do you happen to know",
        1.15,
        "who won the match last night?",
        "I cannot see the results, so please check the news.",
    ),
    (
        "How much should I tip",
        0.45,
        "at a restaurant in America?",
        "Fifteen to twenty percent is usual in America.",
    ),
    (
        "Is it safe to",
        1.05,
        "swim in the sea in April?",
        "The sea is still cold in April, so keep it short.",
    ),
    (
        "Where would you go",
        0.85,
        "for a weekend by the sea?",
        "Brighton is an easy weekend by the sea.",
    ),
    (
        "Could you explain",
        0.35,
        "how a mortgage works?",
        "A bank lends you the price of a home and you pay it back monthly.",
    ),
)
# Fillers the tuning half does not have ("er", "hmm") beside ones it has, in new places.
HELD_OUT_FILLERS: tuple[tuple[str, float, str, str], ...] = (
    (
        "I want to cook something tonight, um",
        0.78,
        "maybe with fish?",
        "Baked salmon with lemon is quick and easy.",
    ),
    (
        "Can you find me, uh",
        0.95,
        "a cheap hotel in Rome?",
        "There are small family hotels near the station in Rome.",
    ),
    (
        "What should I, er",
        0.62,
        "wear to a job interview?",
        "A smart jacket and clean shoes are a safe choice.",
    ),
    (
        "My son wants to learn, hmm",
        1.05,
        "an instrument, which one is easiest?",
        "The ukulele is one of the easiest to start with.",
    ),
    (
        "I am trying to decide, so, uh",
        0.85,
        "should I rent or buy a flat?",
        "Renting is more flexible, buying builds savings over time.",
    ),
    (
        "How do I, um",
        1.15,
        "get rid of ants in the kitchen?",
        "Wipe the counters and seal the gap where they come in.",
    ),
)
# (question, what the user says over the answer, seconds after the agent's first audio)
HELD_OUT_BACKCHANNELS: tuple[tuple[str, str, float], ...] = (
    ("How do I grow tomatoes on a balcony?", "yep", 1.3),
    ("What should I pack for a week in Scotland?", "gotcha", 1.6),
    ("How does a solar panel work?", "oh, interesting", 1.1),
    ("What is a good way to start a podcast?", "oh nice", 1.7),
    ("How do I clean a cast iron pan?", COUGH, 1.4),
    ("Why is the ocean salty?", "uh huh, yeah", 1.2),
    ("How do I get better at chess?", "wow", 1.9),
    ("What should I know before buying a bike?", "right, okay", 1.5),
    ("How do trains stay on the tracks?", LAUGH, 1.0),
    ("What makes bread rise?", "cool", 1.8),
)
# Real interruptions: no cue word, or a backchannel word first.
HELD_OUT_INTERRUPTIONS: tuple[tuple[str, str, float], ...] = (
    ("What should I see in Berlin?", "What about the weekend?", 1.2),
    ("How do I learn to swim as an adult?", "Can you make it shorter?", 1.6),
    ("How do I stop my laptop overheating?", "I already tried that.", 1.0),
    ("Which airline should I fly to Madrid?", "Which one is cheapest?", 1.5),
    ("Is it worth learning Latin?", "Yeah, but is it useful for work?", 1.3),
    ("How do I make my garden attract birds?", "Okay, what about squirrels?", 1.8),
    ("What is the best time to visit Iceland?", "Mm hmm, and how cold is it?", 1.4),
    ("How should I get around Tokyo?", "Right, but I do not have a rail pass.", 1.1),
)


def _voice(kind: str, i: int) -> str:
    return HELD_OUT_VOICES[(KIND_OFFSETS[kind] + i) % len(HELD_OUT_VOICES)]


KIND_OFFSETS = {"question": 0, "paused": 1, "filler": 2, "backchannel": 3, "interruption": 4}
HELD_OUT = TurnSet(
    HELD_OUT_QUESTIONS,
    HELD_OUT_PAUSED,
    HELD_OUT_FILLERS,
    HELD_OUT_BACKCHANNELS,
    HELD_OUT_INTERRUPTIONS,
    voice_of=_voice,
    cough_seed=lambda i: 101 + i,
    recordings=False,
)
