"""The talk page's conversation reducer (web/conversation.js) in real Chromium: server events and
the page's own in, the next state and the effects out — without a DOM, a socket or audio.

The page's behaviour with the reducer in place (a spoken turn, an interrupted answer, a resume
that reconciles, a paused microphone) is what tests/web/test_talk*.py drive end to end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.web.conftest import Launch, ServerFactory, open_page

RUN = """async (script) => {
  const { initialState, reduce } = await import('./conversation.js');
  const plain = (state) => ({
    prefix: state.prefix,
    entries: [...state.entries].map(([key, e]) => [key, e.role, e.text, e.partial, e.note]),
    generations: [...state.generations],
    listening: [...state.listening],
    serverPaused: state.serverPaused,
    outputAudio: state.outputAudio.length,
  });
  let state = initialState();
  const steps = [];
  for (const event of script) {
    const given = plain(state);
    const first = reduce(state, event);
    const again = reduce(state, event);  // the same state and event: the same result
    steps.push({
      type: event.type,
      state: plain(first.state),
      effects: first.effects.map((e) => e.kind + (e.role ? ':' + e.role + ':' + e.text : '')
        + (e.action ? ':' + e.action : '') + (e.key ? ':' + e.key : '')),
      unchanged: JSON.stringify(plain(state)) === JSON.stringify(given),
      repeatable: JSON.stringify(plain(again.state)) === JSON.stringify(plain(first.state))
        && JSON.stringify(again.effects) === JSON.stringify(first.effects),
    });
    state = first.state;
  }
  return steps;
}"""

U = "vs_1:u:item_1"
G = "vs_1:g1"


def _response(status: str, **fields: Any) -> dict[str, Any]:
    return {"id": "resp_1", "generation": 1, "status": status, "conversation_id": "th_1", **fields}


SPOKEN_TURN: list[dict[str, Any]] = [
    {"type": "page.session", "prefix": "vs_1"},
    {"type": "input_audio_buffer.speech_started", "item_id": "item_1"},
    {"type": "input_audio_buffer.committed", "item_id": "item_1"},
    {"type": "conversation.item.input_audio_transcription.completed", "item_id": "item_1",
     "transcript": " What time is it? "},
    {"type": "response.created", "response": _response("in_progress")},
    {"type": "response.output_audio_transcript.delta", "response_id": "resp_1", "delta": "It is"},
    {"type": "response.output_audio_transcript.delta", "response_id": "resp_x", "delta": "lost"},
    {"type": "response.output_audio_transcript.delta", "response_id": "resp_1", "delta": " noon."},
    {"type": "response.output_audio.done", "response_id": "resp_1"},
    {"type": "response.done", "response": _response("completed", output_text="It is noon.")},
    # Out of band (the recording notice): shown, noted, never recorded.
    {"type": "response.created", "response": {**_response("in_progress"), "id": "resp_n",
                                              "generation": 2, "conversation_id": None}},
    {"type": "response.done", "response": {**_response("completed"), "id": "resp_n",
                                           "generation": 2, "conversation_id": None,
                                           "output_text": "This conversation is recorded."}},
]  # fmt: skip


async def test_a_spoken_turn_through_the_reducer(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server() as server:
        page = await open_page(await launch(silence_wav), server)
        steps = await page.evaluate(RUN, SPOKEN_TURN)
    assert all(s["unchanged"] and s["repeatable"] for s in steps), steps
    by = {i: s for i, s in enumerate(steps)}
    assert by[1]["state"]["entries"] == [[U, "user", "…", True, ""]]
    assert by[1]["state"]["listening"] == [U]
    assert by[2]["state"]["entries"] == [[U, "user", "… (transcribing)", True, ""]]
    assert by[2]["state"]["listening"] == [] and by[2]["effects"] == ["moved"]
    assert by[3]["state"]["entries"] == [[U, "user", "What time is it?", False, ""]]
    assert by[3]["effects"] == ["record:user:What time is it?"]
    assert by[4]["state"]["generations"] == [["resp_1", 1]]
    assert by[4]["state"]["entries"][1] == [G, "assistant", "…", True, ""]
    assert by[5]["state"]["entries"][1] == [G, "assistant", "It is", True, ""]
    assert by[6]["state"] == by[5]["state"] and by[6]["effects"] == []  # not this session's
    assert by[7]["state"]["entries"][1] == [G, "assistant", "It is noon.", True, ""]
    assert by[8]["effects"] == ["player:end"]
    assert by[9]["state"]["entries"][1] == [G, "assistant", "It is noon.", False, ""]
    assert by[9]["state"]["generations"] == []
    assert by[9]["effects"] == ["moved", "record:assistant:It is noon."]
    assert by[11]["state"]["entries"][2] == [
        "vs_1:g2", "assistant", "This conversation is recorded.", False,
        "not part of the conversation",
    ]  # fmt: skip
    assert by[11]["effects"] == ["moved"]


async def test_interruptions_failures_pauses_and_a_reconcile(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    script: list[dict[str, Any]] = [
        {"type": "page.earlier", "messages": [{"role": "user", "text": "Hello"}]},
        {"type": "page.divider", "text": "— continued —"},
        {"type": "page.session", "prefix": "vs_1"},
        {"type": "input_audio_buffer.speech_started", "item_id": "item_9"},
        {"type": "conversation.item.input_audio_transcription.completed", "item_id": "item_9",
         "transcript": "  "},
        {"type": "input_audio_buffer.speech_started", "item_id": "item_1"},
        {"type": "openrealtime.input.paused"},
        {"type": "response.created", "response": _response("in_progress")},
        {"type": "openrealtime.response.interrupted", "generation": 1, "reason": "barge_in"},
        {"type": "response.done", "response": _response(
            "cancelled", interrupted=True, heard_text="It is", output_text="It is noon.")},
        {"type": "response.created", "response": {**_response("in_progress"), "id": "resp_2",
                                                  "generation": 2}},
        {"type": "response.done", "response": {**_response("failed"), "id": "resp_2",
                                               "generation": 2, "output_text": "Sorry"}},
        {"type": "page.reconciled", "sessionId": "vs_1", "items": [
            {"journal_seq": 7, "role": "user", "text": "What time is it?"},
            {"journal_seq": 8, "role": "assistant", "text": "It is", "interrupted": True}]},
        *[{"type": "output_audio_buffer.started", "response_id": f"r{i}"} for i in range(205)],
    ]  # fmt: skip
    async with fake_server() as server:
        page = await open_page(await launch(silence_wav), server)
        steps = await page.evaluate(RUN, script)
    assert all(s["unchanged"] and s["repeatable"] for s in steps)
    earlier = ["rec:0", "user", "Hello", False, ""]
    divider = ["divider:1", "divider", "— continued —", False, ""]
    assert steps[2]["state"]["entries"] == [earlier, divider]
    assert steps[4]["state"]["entries"] == [earlier, divider]  # nothing was said: removed
    paused = steps[6]["state"]
    assert paused["serverPaused"] and paused["listening"] == []
    assert paused["entries"] == [earlier, divider]  # speech the server dropped is not shown
    assert steps[8]["effects"] == ["interrupted"]
    assert steps[9]["state"]["entries"][-1] == [G, "assistant", "It is", False, ""]
    assert steps[9]["effects"] == ["moved", f"heard:{G}", "record:assistant:It is"]
    failed = steps[11]["state"]["entries"][-1]
    assert failed == ["vs_1:g2", "assistant", "Sorry", False, "the answer failed; try again"]
    reconciled = steps[12]["state"]
    assert reconciled["prefix"] == "vs_1~1"
    assert reconciled["entries"] == [
        earlier,
        divider,
        ["vs_1~1:j7", "user", "What time is it?", False, ""],
        ["vs_1~1:j8", "assistant", "It is", False, "interrupted — only the part you heard is kept"],
    ]
    assert steps[-1]["state"]["outputAudio"] == 200
    assert steps[-1]["effects"] == ["playback"]
