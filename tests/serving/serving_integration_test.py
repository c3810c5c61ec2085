"""The three-process path for real: 2 inferd workers (toy test model, real
service/batcher) + the gateway binary, driven by the official `openai`
package and by raw HTTP. Loopback and unix sockets only.

Usage: serving_integration_test.py BUILD_DIR
"""
import http.client
import json
import os
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "serving"))
from stack import Stack  # noqa: E402

import openai  # noqa: E402

BUILD = sys.argv.pop(1) if len(sys.argv) > 1 else "build"
MODEL = "moestream"
SCRIPT = "The quick brown fox jumps over the lazy dog."
STEP_US = 10000  # 10 ms per step: cancellation is measured in steps


def chat(text):
    return [{"role": "user", "content": text}]


class ServingStack(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stack = Stack(BUILD, workers=2, worker_args=[f"--toy-step-us={STEP_US}", "--toy-row-us=0"])
        cls.client = openai.OpenAI(base_url=cls.stack.base_url + "/v1", api_key="unused", max_retries=0,
                                   timeout=30)

    @classmethod
    def tearDownClass(cls):
        codes = cls.stack.stop()
        for name, code in codes.items():
            assert code == 0, f"{name} did not stop cleanly: {code}"

    # ---- plain and streaming ----------------------------------------------------
    def test_chat_plain_with_usage(self):
        r = self.client.chat.completions.create(model=MODEL, messages=chat("hi"), temperature=0)
        self.assertEqual(r.choices[0].message.content, SCRIPT)
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.usage.completion_tokens, len(SCRIPT) + 1)  # + EOS
        self.assertGreater(r.usage.prompt_tokens, 0)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)

    def test_chat_streaming_with_usage(self):
        stream = self.client.chat.completions.create(model=MODEL, messages=chat("hi"), temperature=0, stream=True,
                                                     stream_options={"include_usage": True})
        text, finish, usage = "", None, None
        for chunk in stream:
            if chunk.usage:
                usage = chunk.usage
            for c in chunk.choices:
                text += c.delta.content or ""
                finish = c.finish_reason or finish
        self.assertEqual(text, SCRIPT)
        self.assertEqual(finish, "stop")
        self.assertEqual(usage.completion_tokens, len(SCRIPT) + 1)

    def test_completions(self):
        r = self.client.completions.create(model=MODEL, prompt="<|assistant|>\n", max_tokens=9, temperature=0)
        self.assertEqual(r.choices[0].text, SCRIPT[:9])
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 9)
        text = "".join(c.choices[0].text for c in self.client.completions.create(
            model=MODEL, prompt="<|assistant|>\n", max_tokens=9, temperature=0, stream=True))
        self.assertEqual(text, SCRIPT[:9])

    # ---- parameters ---------------------------------------------------------------
    def test_stop_strings_never_leak(self):
        r = self.client.chat.completions.create(model=MODEL, messages=chat("hi"), temperature=0,
                                                stop=["fox", "zzz"])
        self.assertEqual(r.choices[0].message.content, "The quick brown ")
        self.assertEqual(r.choices[0].finish_reason, "stop")
        text = ""
        for chunk in self.client.chat.completions.create(model=MODEL, messages=chat("hi"), temperature=0,
                                                         stop="n fo", stream=True):
            for c in chunk.choices:
                text += c.delta.content or ""
        self.assertEqual(text, "The quick brow")

    def test_seed_reproducible(self):
        kw = dict(model=MODEL, messages=chat("tell"), temperature=1.0, max_tokens=30)
        a = self.client.chat.completions.create(seed=1234, **kw).choices[0].message.content
        b = self.client.chat.completions.create(seed=1234, **kw).choices[0].message.content
        c = self.client.chat.completions.create(seed=99, **kw).choices[0].message.content
        self.assertEqual(a, b)
        self.assertNotEqual(a, c)

    def test_n_choices(self):
        r = self.client.chat.completions.create(model=MODEL, messages=chat("n"), temperature=1.0, n=3, seed=5,
                                                max_tokens=20)
        self.assertEqual([c.index for c in r.choices], [0, 1, 2])
        texts = {c.message.content for c in r.choices}
        self.assertGreater(len(texts), 1)
        self.assertEqual(r.usage.completion_tokens, 60)
        seen = set()
        for chunk in self.client.chat.completions.create(model=MODEL, messages=chat("n"), n=2, stream=True,
                                                         max_tokens=5):
            for c in chunk.choices:
                seen.add(c.index)
        self.assertEqual(seen, {0, 1})

    def test_logprobs(self):
        r = self.client.chat.completions.create(model=MODEL, messages=chat("hi"), temperature=0, max_tokens=5,
                                                logprobs=True, top_logprobs=3)
        lp = r.choices[0].logprobs.content
        self.assertEqual(len(lp), 5)
        self.assertEqual("".join(e.token for e in lp), "The q")
        for e in lp:
            self.assertLessEqual(e.logprob, 0.0)
            self.assertEqual(len(e.top_logprobs), 3)
            self.assertEqual(e.top_logprobs[0].token, e.token)  # greedy picks the best
        n = 0
        for chunk in self.client.chat.completions.create(model=MODEL, messages=chat("hi"), temperature=0,
                                                         max_tokens=4, logprobs=True, top_logprobs=1, stream=True):
            for c in chunk.choices:
                if c.logprobs and c.logprobs.content:
                    n += len(c.logprobs.content)
        self.assertEqual(n, 4)
        r = self.client.completions.create(model=MODEL, prompt="<|assistant|>\n", max_tokens=3, temperature=0,
                                           logprobs=2)
        self.assertEqual(r.choices[0].logprobs.tokens, ["T", "h", "e"])
        self.assertEqual(len(r.choices[0].logprobs.top_logprobs[0]), 2)

    def test_tools_round_trip(self):
        tools = [{"type": "function", "function": {
            "name": "get_weather", "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
        msgs = chat("Weather in Paris?")
        r = self.client.chat.completions.create(model=MODEL, messages=msgs, tools=tools, temperature=0)
        choice = r.choices[0]
        self.assertEqual(choice.finish_reason, "tool_calls")
        call = choice.message.tool_calls[0]
        self.assertEqual(call.function.name, "get_weather")
        self.assertEqual(json.loads(call.function.arguments), {"city": "Paris"})
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function",
             "function": {"name": call.function.name, "arguments": call.function.arguments}}]})
        msgs.append({"role": "tool", "tool_call_id": call.id, "content": "sunny, 24 C"})
        r2 = self.client.chat.completions.create(model=MODEL, messages=msgs, tools=tools, temperature=0)
        self.assertEqual(r2.choices[0].message.content, "It is sunny in Paris.")
        self.assertEqual(r2.choices[0].finish_reason, "stop")

    def test_models_and_health(self):
        ids = [m.id for m in self.client.models.list()]
        self.assertEqual(ids, [MODEL])
        with socket.create_connection(("127.0.0.1", self.stack.port), timeout=5):
            pass
        conn = http.client.HTTPConnection("127.0.0.1", self.stack.port, timeout=5)
        conn.request("GET", "/health")
        r = conn.getresponse()
        self.assertEqual(r.status, 200)
        self.assertEqual(json.loads(r.read())["workers_alive"], 2)
        conn.close()

    # ---- errors through the openai client ------------------------------------------
    def assert_bad_request(self, code, **kw):
        with self.assertRaises(openai.BadRequestError) as cm:
            self.client.chat.completions.create(**kw)
        err = cm.exception.body
        self.assertIn("message", err)
        self.assertIn("param", err)
        self.assertEqual(err.get("code"), code, err)

    def test_errors(self):
        with self.assertRaises(openai.NotFoundError) as cm:  # an unknown model is a 404, as OpenAI's
            self.client.chat.completions.create(model="gpt-4", messages=chat("x"))
        self.assertEqual(cm.exception.body.get("code"), "model_not_found")
        self.assert_bad_request("invalid_value", model=MODEL, messages=chat("x"), n=0)
        self.assert_bad_request("invalid_value", model=MODEL, messages=chat("x"), temperature=3)
        self.assert_bad_request("invalid_type", model=MODEL, messages=chat("x"), max_tokens="ten")
        self.assert_bad_request("invalid_value", model=MODEL, messages=chat("x"),
                                response_format={"type": "json_schema",
                                                 "json_schema": {"name": "x", "schema": {"type": "object", "not": {}}}})
        self.assert_bad_request("context_length_exceeded", model=MODEL, messages=chat("y" * 5000))
        self.assert_bad_request("context_length_exceeded", model=MODEL, messages=chat("x"), max_tokens=4090)
        with self.assertRaises(openai.BadRequestError):
            self.client.completions.create(model=MODEL, prompt="a", echo=True, logprobs=1)

    # ---- raw HTTP: malformed input --------------------------------------------------
    def raw(self, method, path, body=b"", headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.stack.port, timeout=10)
        conn.request(method, path, body=body, headers=headers or {"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        conn.close()
        return r, data

    def test_raw_malformed(self):
        cases = [b"{", b"", b"null", b"[]", b'{"model": "moestream", "messages": "hi"}', b"\xff\xfe\x00",
                 b'{"model": "moestream", "messages": [{"role": "user", "content": "x"}], "stream": 1}']
        for body in cases:
            r, data = self.raw("POST", "/v1/chat/completions", body)
            self.assertEqual(r.status, 400, body)
            err = json.loads(data)["error"]
            self.assertEqual(set(err), {"message", "type", "param", "code"}, body)
        r, data = self.raw("POST", "/v1/chat/completions", b" " * (9 << 20))
        self.assertEqual(r.status, 413)
        self.assertEqual(json.loads(data)["error"]["code"], "body_too_large")
        r, data = self.raw("GET", "/v1/nope")
        self.assertEqual(r.status, 404)
        self.assertIn("error", json.loads(data))

    # ---- cancellation ----------------------------------------------------------------
    def test_disconnect_cancels_within_a_step(self):
        body = json.dumps({"model": MODEL, "messages": chat("long"), "stream": True, "max_tokens": 2000,
                           "temperature": 1.0}).encode()
        before = self.stack.metrics()
        s = socket.create_connection(("127.0.0.1", self.stack.port), timeout=10)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        got = b""
        while got.count(b"data: ") < 5:
            got += s.recv(4096)
        s.close()
        t_close = time.time()
        tok_key = [k for k in before if k.startswith("moe_worker_tokens_total")]

        def tokens():
            m = self.stack.metrics()
            return sum(m.get(k, 0) for k in tok_key)

        at_close = tokens()
        time.sleep(0.5)  # 50 steps of 10 ms: an uncancelled sequence would add ~50 tokens
        after = tokens()
        self.assertLessEqual(after - at_close, 2, "tokens generated after the client left")
        # Worker side: the cancelled sequence joined no step after its cancel arrived.
        deadline = time.time() + 5
        while time.time() < deadline:
            m = self.stack.metrics()
            if sum(v for k, v in m.items() if k.startswith("moe_worker_active_sequences")) == 0:
                break
            time.sleep(0.05)
        m = self.stack.metrics()
        self.assertEqual(sum(v for k, v in m.items() if k.startswith("moe_worker_max_steps_after_cancel")), 0)
        # Every series carries a model label: sum over the series of the name.
        def cancelled(m):
            return sum(v for k, v in m.items() if k.split("{")[0] == "moe_cancelled_sequences_total")
        self.assertGreaterEqual(cancelled(m), cancelled(before) + 1)
        self.assertLess(time.time() - t_close, 6)


def open_stream(port, body, key=None, events=1, timeout=10.0):
    """Raw streaming request; returns (socket, bytes read) once `events` SSE
    data lines arrived or the response ended. Bounded by `timeout`."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    auth = b"Authorization: Bearer " + key.encode() + b"\r\n" if key else b""
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + auth +
              b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    got = b""
    deadline = time.time() + timeout
    while got.count(b"data: ") < events and time.time() < deadline:
        if b"\r\n\r\n" in got and not got.startswith(b"HTTP/1.1 200"):
            break  # an error reply: no stream
        chunk = s.recv(4096)
        if not chunk:
            break
        got += chunk
    return s, got


class AdmissionStack(unittest.TestCase):
    """401 / 429 / 503 on a small gateway; then a worker dies and the other serves."""

    @classmethod
    def setUpClass(cls):
        cls.stack = Stack(BUILD, workers=2, worker_args=["--toy-step-us=20000"],
                          gateway_args=["--api-key=k1", "--api-key=k2", "--api-key=k3", "--per-key-limit=1",
                                        "--max-running=2", "--max-queued=0", "--retry-after=3"])

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def client(self, key):
        return openai.OpenAI(base_url=self.stack.base_url + "/v1", api_key=key, max_retries=0, timeout=30)

    def test_401(self):
        with self.assertRaises(openai.AuthenticationError):
            self.client("wrong").chat.completions.create(model=MODEL, messages=chat("x"))
        conn = http.client.HTTPConnection("127.0.0.1", self.stack.port, timeout=10)
        conn.request("GET", "/v1/models")
        r = conn.getresponse()
        self.assertEqual(r.status, 401)
        self.assertEqual(json.loads(r.read())["error"]["type"], "authentication_error")
        conn.close()
        self.assertEqual([m.id for m in self.client("k1").models.list()], [MODEL])

    def test_429_and_503(self):
        body = json.dumps({"model": MODEL, "messages": chat("x"), "max_tokens": 200, "stream": True}).encode()
        a, got_a = open_stream(self.stack.port, body, "k1")
        self.assertIn(b"data: ", got_a)
        try:
            with self.assertRaises(openai.RateLimitError) as cm:
                self.client("k1").chat.completions.create(model=MODEL, messages=chat("x"), max_tokens=2)
            self.assertEqual(cm.exception.status_code, 429)
            b, got_b = open_stream(self.stack.port, body, "k2")
            self.assertIn(b"data: ", got_b)
            try:
                with self.assertRaises(openai.InternalServerError) as cm:
                    self.client("k3").chat.completions.create(model=MODEL, messages=chat("x"), max_tokens=2)
                self.assertEqual(cm.exception.status_code, 503)
                self.assertEqual(cm.exception.response.headers.get("retry-after"), "3")
                self.assertEqual(cm.exception.body.get("code"), "server_overloaded")
            finally:
                b.close()
        finally:
            a.close()
        # Slots come back once the clients are gone.
        deadline = time.time() + 5
        while time.time() < deadline:
            try:
                r = self.client("k3").chat.completions.create(model=MODEL, messages=chat("x"), max_tokens=2,
                                                              temperature=0)
                self.assertEqual(r.choices[0].message.content, SCRIPT[:2])
                break
            except (openai.InternalServerError, openai.RateLimitError):
                time.sleep(0.05)
        else:
            self.fail("slots were not released after the clients left")

    def test_zz_dead_worker_leaves_rotation(self):
        self.stack.kill_worker(0)
        for _ in range(6):
            r = self.client("k1").chat.completions.create(model=MODEL, messages=chat("x"), max_tokens=3,
                                                          temperature=0)
            self.assertEqual(r.choices[0].message.content, SCRIPT[:3])
        deadline = time.time() + 5
        up = None
        while time.time() < deadline:
            up = sum(v for k, v in self.stack.metrics().items() if k.startswith("moe_worker_up"))
            if up == 1:
                break
            time.sleep(0.1)
        self.assertEqual(up, 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
