"""`voxroom bench copilot-replay`: a recorded run's answers go through the product's own
answer limits, retrieval and guard again, in order, and are scored as the candidate would now
see them."""

from __future__ import annotations

import json
from pathlib import Path

from bench.copilot_replay import written
from state_machine.options import CopilotOptions
from tests.test_bench import bench_cli

DATA = Path(__file__).resolve().parent.parent / "bench" / "copilot_data"


def test_a_recorded_answer_is_cut_where_the_stream_would_stop_it_now() -> None:
    options = CopilotOptions(max_answer_words=5, answer_word_limit=9)
    assert written("I led it. It went well. Then more.", options) == "I led it. It went well. "
    assert written("one two three four five six seven eight nine ten", options) == (
        "one two three four five six seven eight nine"
    )


def test_recorded_answers_are_judged_again_with_the_exchange_before_each(
    tmp_path: Path, capsys
) -> None:
    recorded = [
        {
            "question": "What did you build at Tidewater Games?",
            "heard": "What did you build at Tidewater Games?",
            "answered": True,
            "llm_answer": "I built the matchmaking service in Go for 2 million daily players.",
        },
        {  # the model asked for the resume: the guard answers from the retrieved pieces
            "question": "How many players did it serve?",
            "heard": "How many players did it serve?",
            "answered": True,
            "llm_answer": "Please share your resume.",
        },
        {"question": "What is your biggest weakness?", "answered": False},
    ]
    questions = [
        {"question": "What did you build at Tidewater Games?", "facts": ["matchmaking"]},
        {"question": "How many players did it serve?", "facts": ["2 million"]},
        {"question": "What is your biggest weakness?", "facts": ["public speaking"]},
    ]
    answers, qfile, out = tmp_path / "run.json", tmp_path / "q.json", tmp_path / "again.json"
    answers.write_text(json.dumps(recorded), encoding="utf-8")
    qfile.write_text(json.dumps(questions), encoding="utf-8")
    args = ["--answers", str(answers), "--questions-file", str(qfile), "--json", str(out)]
    assert bench_cli("copilot-replay", *args) == 0
    first, second, third = json.loads(out.read_text(encoding="utf-8"))
    assert not first["replaced"] and first["score"]["grounded"]
    # a follow-up: retrieval searched with the exchange before it finds the players' piece
    assert second["replaced"] and "2 million daily players" in second["answer"]
    assert second["score"]["grounded"] and second["score"]["voice"]
    assert not third["answered"] and "score" not in third
    assert "good 67%" in capsys.readouterr().out
