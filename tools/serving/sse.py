"""Reading an OpenAI-style streamed response (server-sent events) from an http.client response: the
one parser the serving tools share (tools/serving/loadtest.py, structured_decode_bench.py,
tools/bench/side_by_side/run.py)."""
import json


class SseEvents:
    """The JSON events of a `data: ...` stream, in order, up to `data: [DONE]`; `done` says whether the
    stream ended with it (False: the server closed the connection first)."""

    def __init__(self, resp):
        self.resp, self.done = resp, False

    def __iter__(self):
        for raw in self.resp:
            line = raw.strip()
            if not line.startswith(b"data: "):
                continue
            data = line[6:]
            if data == b"[DONE]":
                self.done = True
                return
            yield json.loads(data)


def choice_text(choice):
    """The text a streamed choice adds: `text` (completions) or `delta.content` (chat); "" when none."""
    return choice.get("text") or (choice.get("delta") or {}).get("content") or ""
