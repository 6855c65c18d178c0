"""Drive conf/nginx-secure.conf (as t/126-secure.t starts it) with the official openai client:
   prints "ok <name>" or "not ok <name>: <why>" per check.
   argv: base URL (https://localhost:PORT), CA certificate, good key, revoked key."""
import json
import ssl
import sys
import time
import urllib.request

import openai

base, cert, good_key, revoked_key = sys.argv[1:5]
results = []


def check(name, cond, why=""):
    results.append((name, bool(cond), why))


# the SDK's own HTTP client class (httpx2 in openai 3.x, httpx before), trusting the test CA
make_http = getattr(openai, "DefaultHttpx2Client", None) or openai.DefaultHttpxClient
http = make_http(verify=ssl.create_default_context(cafile=cert), timeout=60)
tls = ssl.create_default_context(cafile=cert)
deadline = time.time() + 120
while True:
    try:
        with urllib.request.urlopen(base + "/health", context=tls, timeout=5) as r:
            if r.status == 200:
                break
    except OSError:
        pass
    if time.time() > deadline:
        print("not ok the model is ready: /health not 200 after 120 s")
        sys.exit(0)
    time.sleep(0.2)


def client(key):
    return openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, http_client=http)


msgs = [{"role": "user", "content": "Say hello"}]


def error_body_ok(e, code):
    # the SDK parses the JSON body and keeps its "error" object as e.body
    return isinstance(e.body, dict) and e.body.get("code") == code and e.body.get("message")


# a good key works
r = client(good_key).chat.completions.create(model="smollm2", messages=msgs, max_tokens=4, temperature=0)
check("good key: a chat completion", r.object == "chat.completion" and r.choices[0].message.content,
      repr(r))

# a wrong key: AuthenticationError with the OpenAI error body and a Bearer challenge
try:
    client("sk-not-a-key").chat.completions.create(model="smollm2", messages=msgs, max_tokens=4)
    check("bad key -> AuthenticationError", False, "no exception")
except openai.AuthenticationError as e:
    check("bad key -> AuthenticationError", e.status_code == 401)
    check("bad key: the body parses", error_body_ok(e, "invalid_api_key"), repr(e.body))
    check("bad key: WWW-Authenticate Bearer",
          e.response.headers.get("www-authenticate", "").startswith("Bearer"), repr(e.response.headers))

# a revoked key: PermissionDeniedError
try:
    client(revoked_key).models.list()
    check("revoked key -> PermissionDeniedError", False, "no exception")
except openai.PermissionDeniedError as e:
    check("revoked key -> PermissionDeniedError", e.status_code == 403)
    check("revoked key: the body parses", error_body_ok(e, "forbidden"), repr(e.body))

# a body over client_max_body_size (16k in the test): 413 as an APIStatusError whose body parses
try:
    client(good_key).chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "x" * 20000}], max_tokens=4)
    check("413 -> APIStatusError", False, "no exception")
except openai.APIStatusError as e:
    check("413 -> APIStatusError", e.status_code == 413, repr(e))
    check("413: the body parses", error_body_ok(e, "request_too_large"), repr(e.body))

# over the key's rate (1 a minute, burst 1 in the test): RateLimitError with Retry-After
limited = None
for _ in range(4):
    try:
        client(good_key).models.list()
    except openai.RateLimitError as e:
        limited = e
        break
check("rate limit -> RateLimitError", limited is not None and limited.status_code == 429, repr(limited))
if limited is not None:
    check("rate limit: the body parses", error_body_ok(limited, "rate_limit_exceeded"), repr(limited.body))
    check("rate limit: Retry-After", limited.response.headers.get("retry-after") == "1",
          repr(limited.response.headers))
    check("rate limit: JSON content type",
          limited.response.headers.get("content-type", "").startswith("application/json"),
          repr(limited.response.headers))
    json.loads(limited.response.text)

for name, good, why in results:
    print(("ok " if good else "not ok ") + name + ("" if good else ": " + why))
