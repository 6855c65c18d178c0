"""src/hooks/README.md's worked example: steering a model per request from the official openai
client (extra_body={"hooks": [...]}). One line per check, "ok <name>" or "not ok <name>: <why>";
used by t/091-request-hooks.t (its server: srt_request_hooks steer steer_any)."""
import sys

import openai

base, model = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=120)
results = []


def check(name, cond, why=""):
    results.append((name, bool(cond), why))


def complete(**extra):
    r = client.completions.create(model=model, prompt="def add(a, b):\n    return", max_tokens=12,
                                  temperature=0, **extra)
    return r.choices[0].text


try:
    plain = complete()
    steered = complete(extra_body={"hooks": [{"name": "steer_any", "config": {"layer": 10, "scale": 4.0}}]})
    check("plain text is HF's", plain == " a + b\n\n# Example usage:\nadd_", repr(plain))
    check("the selection steers", steered != plain, repr(steered))
    check("plain again after steering", complete() == plain)
    stream = client.completions.create(model=model, prompt="def add(a, b):\n    return", max_tokens=12,
                                       temperature=0, stream=True,
                                       extra_body={"hooks": [{"name": "steer_any",
                                                              "config": {"layer": 10, "scale": 4.0}}]})
    check("streamed = not streamed", "".join(c.choices[0].text for c in stream if c.choices) == steered)
    chat = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi!"}],
                                          max_tokens=8, temperature=0,
                                          extra_body={"hooks": [{"name": "steer"}], "cache_salt": "me"})
    check("chat with a selection and a salt", chat.choices[0].message.content is not None)
    try:
        complete(extra_body={"hooks": [{"name": "hidden"}]})
        check("a hook the location does not list is refused", False, "no error")
    except openai.BadRequestError as e:
        check("a hook the location does not list is refused", "'hidden'" in str(e), str(e))
except Exception as e:   # report instead of dying: the test counts the lines
    check("example ran", False, "%s: %s" % (type(e).__name__, e))

for name, good, why in results:
    print(("ok %s" % name) if good else ("not ok %s: %s" % (name, why)))
