"""Structured outputs and the peers' request fields through the real stack: 2 inferd workers
(toy test model over the real service/batcher, byte-level vocabulary) + the gateway binary,
driven by the official `openai` package (chat.completions.parse with a pydantic model) and
raw HTTP. The toy model does not want JSON: whatever comes out valid is the constraint's doing.

Usage: structured_outputs_test.py BUILD_DIR
"""
import concurrent.futures
import json
import os
import re
import sys
import unittest
import urllib.request
from typing import List, Literal, Optional

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "serving"))
from stack import Stack  # noqa: E402

import openai  # noqa: E402
import pydantic  # noqa: E402

BUILD = sys.argv.pop(1) if len(sys.argv) > 1 else "build"
MODEL = "moestream"
SCRIPT = "The quick brown fox jumps over the lazy dog."


def chat(text):
    return [{"role": "user", "content": text}]


class Weather(pydantic.BaseModel):
    city: str = pydantic.Field(max_length=10)
    unit: Literal["celsius", "fahrenheit"]
    temperature: int = pydantic.Field(ge=-50, le=60)
    sunny: bool
    note: Optional[str] = pydantic.Field(default=None, max_length=8)


class Item(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=6)
    qty: int = pydantic.Field(ge=0, le=9)


class Order(pydantic.BaseModel):
    items: List[Item] = pydantic.Field(max_length=3)
    priority: Literal["low", "high"]


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]},
                                                    "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                   "required": ["city", "days"], "additionalProperties": False}}}
TIME_TOOL = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string",
                                                                                "enum": ["UTC", "CET"]}},
                                       "required": ["zone"], "additionalProperties": False}}}


class StructuredOutputs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stack = Stack(BUILD, workers=2, worker_args=["--toy-step-us=0", "--toy-row-us=0"])
        cls.client = openai.OpenAI(base_url=cls.stack.base_url + "/v1", api_key="unused", max_retries=0, timeout=60)

    @classmethod
    def tearDownClass(cls):
        codes = cls.stack.stop()
        for name, code in codes.items():
            assert code == 0, f"{name} did not stop cleanly: {code}"

    def post(self, path, body):
        req = urllib.request.Request(self.stack.base_url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    # ---- the official client's parse() with pydantic models ------------------------------
    def test_parse_with_pydantic_models(self):
        for seed in range(4):
            for model_cls in (Weather, Order):
                r = self.client.chat.completions.parse(model=MODEL, messages=chat("weather?"),
                                                       response_format=model_cls, temperature=1.0, seed=seed,
                                                       max_tokens=400)
                msg = r.choices[0].message
                self.assertEqual(r.choices[0].finish_reason, "stop", msg.content)
                self.assertIsInstance(msg.parsed, model_cls, msg.content)
                model_cls.model_validate_json(msg.content)  # the text itself validates too

    def test_parse_streaming_json_schema(self):
        schema = Weather.model_json_schema()
        text = ""
        for chunk in self.client.chat.completions.create(
                model=MODEL, messages=chat("x"), stream=True, max_tokens=400, temperature=0.7, seed=3,
                response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": schema}}):
            for c in chunk.choices:
                text += c.delta.content or ""
        Weather.model_validate_json(text)

    # ---- constraints inside batches of mixed sequences ------------------------------------
    def test_constraints_hold_in_mixed_concurrent_batches(self):
        def free(i):
            r = self.client.chat.completions.create(model=MODEL, messages=chat("hi"), temperature=0)
            self.assertEqual(r.choices[0].message.content, SCRIPT)

        def parsed(i):
            r = self.client.chat.completions.parse(model=MODEL, messages=chat("q"), response_format=Order,
                                                   temperature=1.0, seed=100 + i, max_tokens=400)
            self.assertIsInstance(r.choices[0].message.parsed, Order)

        def regex(i):
            r = self.client.chat.completions.create(model=MODEL, messages=chat("code"), temperature=1.0, seed=i,
                                                    extra_body={"guided_regex": "[A-Z]{3}-[0-9]{4}"})
            self.assertRegex(r.choices[0].message.content, r"^[A-Z]{3}-[0-9]{4}$")

        def choice(i):
            r = self.client.completions.create(model=MODEL, prompt="answer:", temperature=1.0, seed=i, max_tokens=10,
                                               extra_body={"structured_outputs": {"choice": ["yes", "no", "maybe"]}})
            self.assertIn(r.choices[0].text, ("yes", "no", "maybe"))

        jobs = [free, parsed, regex, choice] * 4
        with concurrent.futures.ThreadPoolExecutor(max_workers=16) as ex:
            for f in [ex.submit(job, i) for i, job in enumerate(jobs)]:
                f.result()

    # ---- every spelling ---------------------------------------------------------------------
    def test_peer_spellings(self):
        # additionalProperties false: a free extra key of random bytes could outrun max_tokens.
        s = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
             "additionalProperties": False}
        for extra in ({"guided_json": s}, {"structured_outputs": {"json": s}}, {"json_schema": s},
                      {"response_format": {"type": "json_object", "schema": s}}):
            r = self.client.chat.completions.create(model=MODEL, messages=chat("x"), temperature=0.5, seed=1,
                                                    max_tokens=100, extra_body=extra)
            self.assertIsInstance(json.loads(r.choices[0].message.content)["ok"], bool, extra)
        r = self.client.chat.completions.create(model=MODEL, messages=chat("x"), temperature=0.5, seed=2,
                                                max_tokens=200, response_format={"type": "json_object"})
        self.assertIsInstance(json.loads(r.choices[0].message.content), dict)
        # A GBNF grammar (llama-server's field) and a Lark one (vLLM's guided_grammar).
        r = self.client.chat.completions.create(model=MODEL, messages=chat("x"), temperature=1.0, seed=3,
                                                extra_body={"grammar": 'root ::= ("ab" | "cd") [0-9]'})
        self.assertRegex(r.choices[0].message.content, r"^(ab|cd)[0-9]$")
        r = self.client.chat.completions.create(model=MODEL, messages=chat("x"), temperature=1.0, seed=4,
                                                extra_body={"guided_grammar": 'start: "x" NUM\nNUM: /[0-9]{2}/'})
        self.assertRegex(r.choices[0].message.content, r"^x[0-9]{2}$")

    def test_length_cut_says_length(self):
        r = self.client.chat.completions.create(model=MODEL, messages=chat("x"), max_tokens=5,
                                                response_format={"type": "json_schema", "json_schema": {
                                                    "name": "o", "schema": Weather.model_json_schema()}})
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 5)

    # ---- tools ---------------------------------------------------------------------------------
    def test_tool_choice_required_and_named(self):
        for seed in range(3):
            r = self.client.chat.completions.create(model=MODEL, messages=chat("plain"), tools=[WEATHER_TOOL, TIME_TOOL],
                                                    tool_choice={"type": "function", "function": {"name": "get_time"}},
                                                    temperature=1.0, seed=seed, max_tokens=200)
            c = r.choices[0]
            self.assertEqual(c.finish_reason, "tool_calls", c.message)
            self.assertEqual(len(c.message.tool_calls), 1)
            self.assertEqual(c.message.tool_calls[0].function.name, "get_time")
            self.assertIn(json.loads(c.message.tool_calls[0].function.arguments)["zone"], ("UTC", "CET"))
            r = self.client.chat.completions.create(model=MODEL, messages=chat("plain"), tools=[WEATHER_TOOL, TIME_TOOL],
                                                    tool_choice="required", parallel_tool_calls=False,
                                                    temperature=1.0, seed=seed, max_tokens=300)
            c = r.choices[0]
            self.assertEqual(c.finish_reason, "tool_calls", c.message)
            self.assertEqual(len(c.message.tool_calls), 1)
            call = c.message.tool_calls[0]
            args = json.loads(call.function.arguments)
            if call.function.name == "get_weather":
                self.assertIn(args["city"], ("Paris", "Rome"))
                self.assertTrue(1 <= args["days"] <= 7)
            else:
                self.assertEqual(call.function.name, "get_time")

    def test_parallel_tool_calls_false_allows_at_most_one(self):
        # The toy writes a call when it sees tools; with parallel_tool_calls=false nothing may follow it.
        r = self.client.chat.completions.create(model=MODEL, messages=chat("weather"), tools=[WEATHER_TOOL],
                                                parallel_tool_calls=False, temperature=0, max_tokens=200)
        c = r.choices[0]
        self.assertLessEqual(len(c.message.tool_calls or []), 1)

    # ---- refusals by name --------------------------------------------------------------------
    def assert_400(self, param, fragment=None, **kw):
        with self.assertRaises(openai.BadRequestError) as cm:
            self.client.chat.completions.create(model=MODEL, messages=chat("x"), **kw)
        err = cm.exception.body
        self.assertEqual(err.get("param"), param, err)
        if fragment:
            self.assertIn(fragment, err["message"])

    def test_unenforceable_schema_keywords_are_refused_by_name(self):
        def fmt(schema):
            return {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
        self.assert_400("response_format", "'uniqueItems'",
                        response_format=fmt({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}))
        self.assert_400("response_format", "'not'", response_format=fmt({"type": "object", "not": {"required": ["a"]}}))
        self.assert_400("response_format", "'maxLength'",
                        response_format=fmt({"type": "string", "maxLength": 10 ** 6}))
        self.assert_400("guided_regex", extra_body={"guided_regex": "(unclosed"})
        self.assert_400("ignore_eos", extra_body={"ignore_eos": True, "guided_regex": "a"})
        self.assert_400("response_format", "tool_choice 'required'", tools=[WEATHER_TOOL], tool_choice="required",
                        response_format={"type": "json_object"})
        self.assert_400("temprature", extra_body={"temprature": 1})

    # ---- the other fields act ------------------------------------------------------------------
    def test_sampling_extras_act(self):
        # min_tokens: the toy wants EOS after 44 bytes; it must wait.
        r = self.client.chat.completions.create(model=MODEL, messages=chat("hi"), temperature=0, max_tokens=60,
                                                extra_body={"min_tokens": 50})
        self.assertGreaterEqual(r.usage.completion_tokens, 50)
        self.assertTrue(r.choices[0].message.content.startswith(SCRIPT))
        # ignore_eos: runs to max_tokens.
        r = self.client.chat.completions.create(model=MODEL, messages=chat("hi"), temperature=0, max_tokens=55,
                                                extra_body={"ignore_eos": True})
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 55)
        # stop_token_ids: 'q' (113) ends it; include_stop_str_in_output keeps the stop string.
        r = self.client.chat.completions.create(model=MODEL, messages=chat("hi"), temperature=0,
                                                extra_body={"stop_token_ids": [113]})
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.choices[0].message.content, "The ")
        r = self.client.chat.completions.create(model=MODEL, messages=chat("hi"), temperature=0, stop=["fox"],
                                                extra_body={"include_stop_str_in_output": True})
        self.assertEqual(r.choices[0].message.content, "The quick brown fox")
        # logit_bias: +100 on 'Z'.
        r = self.client.chat.completions.create(model=MODEL, messages=chat("hi"), temperature=0, max_tokens=4,
                                                logit_bias={"90": 100})
        self.assertEqual(r.choices[0].message.content, "ZZZZ")
        # repetition_penalty changes the greedy text of a repetitive script.
        a = self.client.chat.completions.create(model=MODEL, messages=chat("hi"), temperature=0, max_tokens=20,
                                                extra_body={"repetition_penalty": 1.0}).choices[0].message.content
        b = self.client.chat.completions.create(model=MODEL, messages=chat("hi"), temperature=0, max_tokens=20,
                                                extra_body={"repetition_penalty": 5.0}).choices[0].message.content
        self.assertEqual(a, SCRIPT[:20])
        self.assertNotEqual(a, b)

    def test_completions_echo_and_prompt_batches(self):
        r = self.client.completions.create(model=MODEL, prompt=["<|assistant|>\n", "<|assistant|>\nx"], n=2,
                                           max_tokens=5, temperature=0, echo=True)
        self.assertEqual(len(r.choices), 4)
        self.assertEqual([c.index for c in r.choices], [0, 1, 2, 3])
        self.assertEqual(r.choices[0].text, "<|assistant|>\n" + SCRIPT[:5])
        self.assertEqual(r.choices[1].text, "<|assistant|>\n" + SCRIPT[:5])
        self.assertTrue(r.choices[2].text.startswith("<|assistant|>\nx"))
        self.assertEqual(r.usage.completion_tokens, 20)
        self.assertEqual(r.usage.prompt_tokens, 14 + 15)
        text = {}
        for chunk in self.client.completions.create(model=MODEL, prompt=[[60, 61], "<|assistant|>\n"], max_tokens=3,
                                                    temperature=0, stream=True, echo=True):
            for c in chunk.choices:
                text[c.index] = text.get(c.index, "") + c.text
        self.assertEqual(text[0][:2], "<=")
        self.assertEqual(text[1], "<|assistant|>\n" + SCRIPT[:3])

    # ---- tokenize / detokenize / admin --------------------------------------------------------
    def test_tokenize_detokenize(self):
        st, j = self.post("/tokenize", {"model": MODEL, "prompt": "hey", "return_token_strs": True})
        self.assertEqual(st, 200, j)
        self.assertEqual(j["tokens"], [104, 101, 121])
        self.assertEqual(j["count"], 3)
        self.assertEqual(j["token_strs"], ["h", "e", "y"])
        self.assertGreater(j["max_model_len"], 0)
        st, c = self.post("/tokenize", {"messages": chat("hi")})
        self.assertEqual(st, 200, c)
        self.assertEqual(bytes(c["tokens"]).decode(), "<|user|>\nhi\n<|assistant|>\n")
        self.assertIsNone(c["token_strs"])
        st, d = self.post("/detokenize", {"model": MODEL, "tokens": j["tokens"]})
        self.assertEqual((st, d), (200, {"prompt": "hey"}))
        st, e = self.post("/detokenize", {"tokens": [1, 99999]})
        self.assertEqual(st, 400)
        self.assertEqual(e["error"]["param"], "tokens[1]")

    def test_admin_workers(self):
        with urllib.request.urlopen(self.stack.base_url + "/admin/workers", timeout=10) as r:
            j = json.loads(r.read())
        self.assertEqual(len(j["data"]), 2)
        for w in j["data"]:
            self.assertEqual(w["model"], "toy-byte")
            self.assertTrue(w["alive"])
            self.assertTrue(w["structured_outputs"]["available"])
            self.assertTrue(w["structured_outputs"]["matches_gateway"])
            for k in ("load", "kv_cache", "prefix_cache", "last_error"):
                self.assertIn(k, w)

    def test_reasoning_field_beside_reasoning_content(self):
        # The byte codec's parser reads <think>..</think>; the toy writes what the prompt's
        # completions ask: use the completions-free chat path with a script-less check.
        st, j = self.post("/v1/chat/completions", {"model": MODEL, "messages": chat("hi"), "temperature": 0,
                                                   "max_tokens": 3})
        self.assertEqual(st, 200)
        self.assertNotIn("reasoning", j["choices"][0]["message"])  # no reasoning, no field


if __name__ == "__main__":
    unittest.main(verbosity=2)
