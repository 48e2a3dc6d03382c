"""The tuning of the bundled Whisper (agent.adapters.stt.whisper): what its decoder does
(agent.adapters.stt.whisper_decoding) and when its stream decodes; a phone caller's variant.
The figures behind the defaults: docs/benchmarks.md, "Whisper's decoding, tuned"."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

# Whisper's encoder has 1500 positions = 30 s of audio; a window plus its pad must fit.
MAX_ENCODER_S = 30.0


@dataclass(frozen=True)
class WhisperOptions:
    """Tuning of `WhisperSTT`; the defaults are the measured best on 2 cores."""

    # Re-decode the utterance for a partial after this much new audio. A partial decoded
    # during the question's last word can start the answer before the speech ends, and only
    # those answers are heard within ~400 ms (docs/benchmarks.md, issue #32); one decode per
    # stream at a time and one partial per pool at a time bound what a denser cadence costs.
    partial_interval_s: float = 0.25
    # ... and after this much while other decodes wait for the pool (several sessions speak at
    # once on one worker): there the denser cadence took the CPU the others' answers needed.
    busy_partial_interval_s: float = 0.4
    # The first partial waits for this much audio after the first voiced frame.
    first_partial_s: float = 0.5
    # Zero samples appended to every decoded clip, and encoder frames of pure silence appended
    # after those (see agent.adapters.stt.whisper_decoding).
    end_pad_s: float = 1.0
    end_silence_frames_s: float = 5.0
    # Decoder settings: penalty on repeated tokens; generated tokens allowed per second of audio.
    repetition_penalty: float = 1.1
    max_tokens_per_s: float = 6.0
    # The final decode (the one that covers all the speech once the audio has gone quiet, or
    # finalize()'s own) is greedy first; when the decoder is unsure of that text (its mean
    # log probability per token below `unsure_logprob`), the same encoder output is decoded
    # again with a beam of `final_beam_size`. Right transcripts score above the threshold and
    # wrong ones mostly below it, so the beam is paid for only where it helps: nearly all of a
    # beam-on-every-final's gain at a fraction of its time.
    final_beam_size: int = 5
    unsure_logprob: float = -0.6
    # Every final is the beam's, sure or not (no greedy pass first): where the transcript's
    # words matter more than ~100 ms (`question_options`).
    beam_every_final: bool = False
    # A decode with nothing forced is no speech when the decoder's no-speech probability is
    # above `no_speech_prob` and its text scores below `no_speech_logprob` (faster-whisper's
    # rule and thresholds). A long utterance cut into windows can leave a last one of breath
    # or room noise, otherwise written as "you" or, with the beam, "Go to the end of"; one-word
    # answers ("Yes.", "Okay.", "Why?") stay well under the thresholds.
    no_speech_prob: float = 0.6
    no_speech_logprob: float = -1.0
    # A 20 ms frame is voiced when it is louder than the floor and within `speech_range_db`
    # of the loudest frame of the utterance.
    speech_floor_dbfs: float = -50.0
    speech_range_db: float = 26.0
    # Quiet audio after the last voiced frame that marks a likely end of speech: a decode then
    # starts at once, and a decode covering up to there is reused by finalize(). It also keeps
    # soft word endings (an "s", an "f") that fall below the voicing threshold. Shorter
    # starts the reply sooner at hardly any cost in words.
    endpoint_margin_s: float = 0.04
    # Reuse that decode as the final (False: finalize() always decodes the whole utterance).
    reuse_endpoint_decode: bool = True
    # Force the tokens two consecutive decodes agree on as the prefix of later partials (a
    # final is never forced: agent.adapters.stt.whisper_decoding).
    commit_agreed_prefix: bool = True
    # Longer speech is cut at the quietest frame of the window's last `window_cut_search_s`
    # and decoded window by window, each with the previous text as context.
    max_window_s: float = 20.0
    window_cut_search_s: float = 3.0

    def __post_init__(self) -> None:
        if self.max_window_s + self.end_pad_s > MAX_ENCODER_S:
            raise ValueError(f"max_window_s + end_pad_s must be <= {MAX_ENCODER_S} s")
        if not 0 < self.window_cut_search_s < self.max_window_s:
            raise ValueError("window_cut_search_s must be in (0, max_window_s)")
        if min(self.partial_interval_s, self.busy_partial_interval_s, self.first_partial_s) <= 0:
            raise ValueError(
                "partial_interval_s, busy_partial_interval_s and first_partial_s must be positive"
            )


# A phone line's speech (8 kHz, 300-3400 Hz: nothing above 4 kHz) looks less like speech to
# Whisper: whole questions over the line score a no-speech probability above the wideband
# threshold, and some came out as no words at all. Breath or room noise still scores above
# this one.
PHONE_NO_SPEECH_PROB = 0.85
# The line cuts an "s", an "f" or a "th" to little more than noise (their energy is mostly above
# 4 kHz), so the voiced end falls before a soft word ending and a decode at the usual margin
# stops short of it ("opening hour" for "opening hours").
PHONE_ENDPOINT_MARGIN_S = 0.12


COPILOT_PARTIAL_INTERVAL_S = 0.4


def question_options(options: WhisperOptions) -> WhisperOptions:
    """`options` for an interviewer's questions (the copilot): every final is a beam search
    over the whole question. The answer is looked up and written
    from the question's words, so a misheard one ("that memory results" for "exam results")
    costs the answer; that is worth the beam's time, which the first words then wait for
    (docs/benchmarks.md, the copilot's sixth pass). Partials keep their committed prefix (they
    are read ahead, not answered), and come no more often than every 0.4 s: the copilot's
    answer reads its prompt on the same cores, and its figures were measured at that cadence."""
    return dataclasses.replace(
        options,
        beam_every_final=True,
        partial_interval_s=max(options.partial_interval_s, COPILOT_PARTIAL_INTERVAL_S),
        busy_partial_interval_s=max(options.busy_partial_interval_s, COPILOT_PARTIAL_INTERVAL_S),
    )


def phone_band_options(options: WhisperOptions) -> WhisperOptions:
    """`options` for a phone caller's narrowband speech. Also no agreed prefix on its
    partials: the first second of narrowband speech is often misread twice the same way
    ("Well, can you know?"), and forced on every later partial, that reading steers the
    answers started on them."""
    return dataclasses.replace(
        options,
        no_speech_prob=max(options.no_speech_prob, PHONE_NO_SPEECH_PROB),
        endpoint_margin_s=max(options.endpoint_margin_s, PHONE_ENDPOINT_MARGIN_S),
        commit_agreed_prefix=False,
    )
