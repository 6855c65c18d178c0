"""src/hooks/README.md's worked example: a layer's residual stream for a set of prompts, into
numpy, from the official openai client (extra_body={"return_activations": [...]}). One line
per check, "ok <name>" or "not ok <name>: <why>"; used by t/093-activations.t (its server:
srt_max_activation_bytes 2m)."""
import base64
import sys

import numpy as np
import openai

base, model = sys.argv[1], sys.argv[2]
results = []


def check(name, cond, why=""):
    results.append((name, bool(cond), why))


# --- the example (as in src/hooks/README.md) -------------------------------------------------
def tensor(a):
    """One returned activation as a numpy array: little-endian, row-major, a["shape"]."""
    dtype = {"f32": "<f4", "f16": "<f2"}[a["dtype"]]
    return np.frombuffer(base64.b64decode(a["data"]), dtype=dtype).reshape(a["shape"])


client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=300)
prompts = ["The capital of France is", "def add(a, b):\n    return", "Once upon a time"]
layer = "model.layers.10"            # the residual stream after decoder layer 10

last, every = [], []
try:
    for p in prompts:
        # max_tokens=1: the rows are exactly the prompt's positions
        r = client.completions.create(model=model, prompt=p, max_tokens=1, temperature=0, extra_body={
            "return_activations": [{"module": layer, "reduce": "last", "dtype": "f32"},
                                   {"module": layer, "reduce": "all", "dtype": "f16"}]})
        acts = r.model_dump()["choices"][0]["activations"]
        last.append(tensor(acts[0]))     # [hidden]: at the prompt's last token
        every.append(tensor(acts[1]))    # [prompt tokens, hidden]
        check("'%s': one row per prompt token" % p[:12], every[-1].shape == (r.usage.prompt_tokens, 576),
              "%s vs %d tokens" % (every[-1].shape, r.usage.prompt_tokens))

    X = np.stack(last)                   # [n_prompts, hidden], ready for a probe or PCA
    unit = X / np.linalg.norm(X, axis=1, keepdims=True)
    sim = unit @ unit.T                  # cosine similarity of the prompts' last-token states
# ----------------------------------------------------------------------------------------------
    check("X is [3, 576] float32", X.shape == (3, 576) and X.dtype == np.float32, str(X.shape))
    check("the last row of 'all' is 'last' rounded to f16",
          all(e[-1].tobytes() == l.astype("<f2").tobytes() for e, l in zip(every, last)))
    check("distinct prompts, distinct states", np.all(sim[~np.eye(3, dtype=bool)] < 0.9999), str(sim))
    check("finite values", np.isfinite(X).all())
except Exception as e:   # report instead of dying: the test counts the lines
    check("example ran", False, "%s: %s" % (type(e).__name__, e))

for name, good, why in results:
    print(("ok %s" % name) if good else ("not ok %s: %s" % (name, why)))
