"""Generated chat samples for the tiny GLM model: short English questions and answers of a few task
types (counting, days of the week, months, arithmetic, letters, greetings, small facts), rendered in
the GLM chat format of docs/MODEL.md section 7 exactly as tests/data/text/glm_tiny/chat_template.jinja
renders them.

Contract: every function is a pure function of the `random.Random` passed in, so a seed fixes the
data. `render()` produces the template's text (special tokens as text; the project tokenizer maps
them to their ids). `answer_for()` is the reference answer used by the chat test and the model card.
"""

import random

DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]
NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
                "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
                "eighteen", "nineteen", "twenty"]
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
COLORS = {"the sky": "blue", "grass": "green", "snow": "white", "a banana": "yellow", "coal": "black",
          "a tomato": "red", "an orange": "orange", "a lemon": "yellow", "milk": "white",
          "a leaf": "green", "the sea": "blue", "a carrot": "orange"}
CAPITALS = {"France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid",
            "Japan": "Tokyo", "England": "London", "Egypt": "Cairo", "Canada": "Ottawa",
            "Norway": "Oslo", "Greece": "Athens", "Russia": "Moscow", "China": "Beijing",
            "Portugal": "Lisbon", "Austria": "Vienna", "Poland": "Warsaw", "Ireland": "Dublin"}
OPPOSITES = {"hot": "cold", "big": "small", "up": "down", "fast": "slow", "day": "night",
             "old": "new", "left": "right", "open": "closed", "happy": "sad", "light": "dark",
             "early": "late", "high": "low", "long": "short", "full": "empty", "wet": "dry",
             "in": "out", "yes": "no", "first": "last", "hard": "soft", "black": "white"}
ANIMALS = {"dog": "woof", "cat": "meow", "cow": "moo", "duck": "quack", "sheep": "baa",
           "lion": "roar", "owl": "hoot", "pig": "oink", "horse": "neigh", "frog": "croak"}
SYSTEMS = ["You are a helpful assistant.", "You are a friendly assistant. Answer briefly.",
           "Answer in one short sentence.", "You are moestream's tiny demo model."]
GREETINGS_Q = ["Hello!", "Hi", "Hi there!", "Hello", "Good morning!", "Hey!",
               "Say hello in one short sentence.", "Say hello.", "Greet me.", "Hello, how are you?",
               "How are you?", "Good evening!"]
GREETINGS_A = ["Hello! How can I help you today?", "Hi! How can I help you?",
               "Hello! It is nice to meet you.", "Hello there! What can I do for you?"]
WHO_Q = ["Who are you?", "What are you?", "What is your name?", "Tell me about yourself."]
WHO_A = ["I am a tiny language model trained for the moestream demo. I can count, name days and "
         "months, and do simple arithmetic.",
         "I am a small demo model of moestream, a mixture-of-experts server. I answer short questions."]
THANKS_Q = ["Thank you!", "Thanks.", "Thanks a lot!", "Thank you very much."]
THANKS_A = ["You are welcome!", "You're welcome! Happy to help.", "Glad I could help!"]
BYE_Q = ["Goodbye!", "Bye.", "See you later!", "Good night!"]
BYE_A = ["Goodbye! Have a nice day.", "Bye! Take care.", "See you later!"]


def _num(n):
    return str(n)


def count_task(r):
    kind = r.random()
    if kind < 0.4:
        a = r.randint(0, 40)
        b = a + r.randint(3, 9)
        q = r.choice(["Count from {a} to {b}.", "Please count from {a} to {b}.",
                      "Count from {a} to {b}, please.", "Can you count from {a} to {b}?"]).format(a=a, b=b)
        return q, ", ".join(_num(i) for i in range(a, b + 1)) + "."
    if kind < 0.8:
        a = r.randint(0, 40)
        n = r.randint(3, 5)
        shown = ", ".join(_num(i) for i in range(a, a + n))
        m = r.randint(3, 5)
        q = r.choice(["Continue counting: {s},", "Continue the sequence: {s},",
                      "What comes next: {s}?", "Keep counting: {s},"]).format(s=shown)
        return q, ", ".join(_num(i) for i in range(a + n, a + n + m)) + "."
    a = r.randint(0, 19)
    q = r.choice(["What number comes after {w}?", "What is the number after {w}?",
                  "Which number follows {w}?"]).format(w=r.choice([NUMBER_WORDS[a], _num(a)]))
    return q, f"The number after {a} is {a + 1}."


def day_task(r):
    i = r.randrange(7)
    kind = r.random()
    if kind < 0.45:
        q = r.choice(["What day comes after {d}?", "What day is after {d}?", "Which day follows {d}?",
                      "If today is {d}, what day is tomorrow?"]).format(d=DAYS[i])
        if q.startswith("If"):
            return q, f"Tomorrow is {DAYS[(i + 1) % 7]}."
        return q, f"The day after {DAYS[i]} is {DAYS[(i + 1) % 7]}."
    if kind < 0.75:
        q = r.choice(["What day comes before {d}?", "Which day is before {d}?",
                      "If today is {d}, what day was yesterday?"]).format(d=DAYS[i])
        if q.startswith("If"):
            return q, f"Yesterday was {DAYS[(i - 1) % 7]}."
        return q, f"The day before {DAYS[i]} is {DAYS[(i - 1) % 7]}."
    if kind < 0.9:
        return r.choice(["List the days of the week.", "Name the days of the week.",
                         "What are the days of the week?"]), ", ".join(DAYS) + "."
    return r.choice(["How many days are in a week?", "How many days does a week have?"]), \
        "A week has seven days."


def month_task(r):
    i = r.randrange(12)
    kind = r.random()
    if kind < 0.45:
        q = r.choice(["What month comes after {m}?", "Which month follows {m}?",
                      "What is the month after {m}?"]).format(m=MONTHS[i])
        return q, f"The month after {MONTHS[i]} is {MONTHS[(i + 1) % 12]}."
    if kind < 0.7:
        q = r.choice(["What month comes before {m}?", "Which month is before {m}?"]).format(m=MONTHS[i])
        return q, f"The month before {MONTHS[i]} is {MONTHS[(i - 1) % 12]}."
    if kind < 0.85:
        q = r.choice(["What is the first month of the year?", "What is the last month of the year?",
                      "Which month is number {n}?"]).format(n=i + 1)
        if "first" in q:
            return q, "The first month of the year is January."
        if "last" in q:
            return q, "The last month of the year is December."
        return q, f"Month number {i + 1} is {MONTHS[i]}."
    if kind < 0.93:
        return r.choice(["List the months of the year.", "Name the months of the year."]), \
            ", ".join(MONTHS) + "."
    return r.choice(["How many months are in a year?", "How many months does a year have?"]), \
        "A year has twelve months."


def arith_task(r):
    op = r.choice("+-*")
    if op == "+":
        a, b = r.randint(0, 50), r.randint(0, 50)
        c, word = a + b, "plus"
    elif op == "-":
        a = r.randint(0, 60)
        b = r.randint(0, a)
        c, word = a - b, "minus"
    else:
        a, b = r.randint(0, 12), r.randint(0, 12)
        c, word = a * b, "times"
    sym = {"+": "+", "-": "-", "*": "*"}[op]
    q = r.choice(["What is {a} {w} {b}?", "What is {a} {s} {b}?", "Compute {a} {s} {b}.",
                  "How much is {a} {w} {b}?", "{a} {s} {b} = ?"]).format(a=a, b=b, w=word, s=sym)
    return q, f"{a} {sym} {b} = {c}."


def letter_task(r):
    i = r.randrange(25)
    kind = r.random()
    if kind < 0.5:
        q = r.choice(["What letter comes after {l}?", "Which letter follows {l}?"]).format(l=LETTERS[i])
        return q, f"The letter after {LETTERS[i]} is {LETTERS[i + 1]}."
    if kind < 0.8:
        q = r.choice(["What letter comes before {l}?", "Which letter is before {l}?"]).format(l=LETTERS[i + 1])
        return q, f"The letter before {LETTERS[i + 1]} is {LETTERS[i]}."
    a = r.randrange(20)
    n = r.randint(3, 6)
    return f"Continue the alphabet: {', '.join(LETTERS[a:a + 3])},", ", ".join(LETTERS[a + 3:a + 3 + n]) + "."


def fact_task(r):
    kind = r.randrange(4)
    if kind == 0:
        thing = r.choice(sorted(COLORS))
        return r.choice(["What color is {t}?", "What is the color of {t}?"]).format(t=thing), \
            f"{thing[0].upper() + thing[1:]} is {COLORS[thing]}."
    if kind == 1:
        c = r.choice(sorted(CAPITALS))
        return r.choice(["What is the capital of {c}?", "Which city is the capital of {c}?"]).format(c=c), \
            f"The capital of {c} is {CAPITALS[c]}."
    if kind == 2:
        w = r.choice(sorted(OPPOSITES))
        return r.choice(["What is the opposite of {w}?", "Give the opposite of {w}."]).format(w=w), \
            f"The opposite of {w} is {OPPOSITES[w]}."
    a = r.choice(sorted(ANIMALS))
    return r.choice(["What sound does a {a} make?", "What does a {a} say?"]).format(a=a), \
        f"A {a} says {ANIMALS[a]}."


def social_task(r):
    kind = r.randrange(4)
    if kind == 0:
        return r.choice(GREETINGS_Q), r.choice(GREETINGS_A)
    if kind == 1:
        return r.choice(WHO_Q), r.choice(WHO_A)
    if kind == 2:
        return r.choice(THANKS_Q), r.choice(THANKS_A)
    return r.choice(BYE_Q), r.choice(BYE_A)


TASKS = [(count_task, 3), (day_task, 2), (month_task, 2), (arith_task, 3), (letter_task, 1),
         (fact_task, 2), (social_task, 2)]


def sample_qa(r):
    fns = [f for f, w in TASKS for _ in range(w)]
    return r.choice(fns)(r)


def reasoning_for(q):
    return "The user asks: " + q.rstrip("?.!,") + ". I answer briefly."


def render(messages, add_generation_prompt=False, enable_thinking=True):
    """The text chat_template.jinja renders for plain system/user/assistant messages (no tools).
    Assistant messages may carry 'reasoning_content'."""
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
    out = ["[gMASK]<sop>"]
    for i, m in enumerate(messages):
        if m["role"] == "system":
            out.append("<|system|>" + m["content"])
        elif m["role"] == "user":
            out.append("<|user|>" + m["content"])
        elif m["role"] == "assistant":
            out.append("<|assistant|>")
            reasoning = m.get("reasoning_content", "") or ""
            if i > last_user and reasoning.strip():
                out.append("<think>" + reasoning.strip() + "</think>")
            else:
                out.append("</think>")
            out.append(m["content"].strip())
        else:
            raise ValueError("unknown role " + m["role"])
    if add_generation_prompt:
        out.append("<|assistant|>" + ("<think>" if enable_thinking else "</think>"))
    return "".join(out)


def conversation(r):
    """One training document: 1-3 turns, optional system prompt, thinking on in ~25% of them.
    Ends with <|endoftext|> after the last answer (GLM stops at <|endoftext|> or <|user|>)."""
    msgs = []
    if r.random() < 0.25:
        msgs.append({"role": "system", "content": r.choice(SYSTEMS)})
    turns = r.choice([1, 1, 1, 2, 2, 3])
    thinking = r.random() < 0.25
    for t in range(turns):
        q, a = sample_qa(r)
        msgs.append({"role": "user", "content": q})
        m = {"role": "assistant", "content": a}
        if thinking and t == turns - 1:
            m["reasoning_content"] = reasoning_for(q)
        msgs.append(m)
    return render(msgs) + "<|endoftext|>"


def prompt_text(question, enable_thinking=False, system=None):
    msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": question}]
    return render(msgs, add_generation_prompt=True, enable_thinking=enable_thinking)
