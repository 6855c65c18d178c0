"""Drive ngx_srt with the official openai Python client; prints one line per check:
   "ok <name>" or "not ok <name>: <why>". Used by t/060-openai.t."""
import sys

import openai

base = sys.argv[1]
model = sys.argv[2]
client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=60)
results = []


def check(name, cond, why=""):
    results.append((name, bool(cond), why))


# non-streamed chat
r = client.chat.completions.create(
    model=model, messages=[{"role": "user", "content": "Say hello"}], max_tokens=8, temperature=0)
check("chat: object", r.object == "chat.completion")
check("chat: one choice with text", len(r.choices) == 1 and r.choices[0].message.content,
      repr(r.choices))
check("chat: role", r.choices[0].message.role == "assistant")
check("chat: finish_reason", r.choices[0].finish_reason in ("stop", "length"))
check("chat: usage", r.usage.completion_tokens > 0 and
      r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, repr(r.usage))
text_plain = r.choices[0].message.content

# streamed chat: the same greedy text, assembled from the deltas
parts, finish, usage, roles = [], None, None, []
stream = client.chat.completions.create(
    model=model, messages=[{"role": "user", "content": "Say hello"}], max_tokens=8, temperature=0,
    stream=True, stream_options={"include_usage": True})
for chunk in stream:
    if chunk.usage is not None:
        usage = chunk.usage
    for c in chunk.choices:
        if c.delta.role:
            roles.append(c.delta.role)
        if c.delta.content:
            parts.append(c.delta.content)
        if c.finish_reason:
            finish = c.finish_reason
check("stream: role first", roles == ["assistant"], repr(roles))
check("stream: same text as non-streamed", "".join(parts) == text_plain,
      repr(("".join(parts), text_plain)))
check("stream: finish_reason", finish in ("stop", "length"), repr(finish))
check("stream: usage chunk", usage is not None and usage.completion_tokens > 0, repr(usage))

# completions, string prompt and token ids
r = client.completions.create(model=model, prompt="1, 2, 3, 4, 5, 6,", max_tokens=12, temperature=0)
check("completions: text", r.choices[0].text == " 7, 8, 9, 10", repr(r.choices[0].text))
r = client.completions.create(model=model, prompt=[33, 28, 216, 34, 28, 216], max_tokens=3,
                              temperature=0, stop=[","])
check("completions: token ids + stop", r.choices[0].finish_reason == "stop", repr(r.choices[0]))

# models
m = client.models.list()
check("models: served name", [x.id for x in m.data] == [model], repr(m.data))

# errors surface as the client's exception types
try:
    client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    check("404 -> NotFoundError", False, "no exception")
except openai.NotFoundError as e:
    check("404 -> NotFoundError", e.status_code == 404)
try:
    client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}],
                                   temperature=5)
    check("400 -> BadRequestError", False, "no exception")
except openai.BadRequestError as e:
    check("400 -> BadRequestError", "temperature" in str(e), str(e))

for name, good, why in results:
    print(("ok " if good else "not ok ") + name + ("" if good else ": " + why))
