#!/usr/bin/env python3
"""Control-vector fixtures for t/092-control-vector.t.

Writes, into OUTDIR:
  cv.gguf   llama.cpp's control-vector format (as its cvector-generator writes it: arch
            "controlvector", controlvector.model_hint, controlvector.layer_count, 1-D F32
            tensors direction.1 .. direction.N) with seeded random directions for SmolLM2
            (hidden 576, 30 layers);
  ref.json  the reference: llama.cpp's rules (common_control_vector_load_one and
            llama_adapter_cvec) applied in Python to the same file, written as per-request
            steering specs, all named "ref": for each layer L in [max(A, 1), min(B, n_layer-1)]
            with a direction, scale * direction.L added to model.layers.L's output;
  bad.gguf  a file with direction.0, which llama.cpp refuses.
Usage: make_control_vector.py OUTDIR SCALE A B [N_EMBD N_LAYER]
(N_EMBD, N_LAYER: another model's hidden size and layer count; default SmolLM2's 576, 30)"""
import json
import os
import sys

import numpy as np
import gguf

N_EMBD, N_LAYER = 576, 30


def write(path, dirs):
    w = gguf.GGUFWriter(path, "controlvector")
    w.add_string("controlvector.model_hint", "llama")
    w.add_int32("controlvector.layer_count", len(dirs))
    for il, d in sorted(dirs.items()):
        w.add_tensor(f"direction.{il}", d.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    global N_EMBD, N_LAYER
    out, scale, a, b = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    if len(sys.argv) > 6:
        N_EMBD, N_LAYER = int(sys.argv[5]), int(sys.argv[6])
    rng = np.random.default_rng(17)
    dirs = {il: (rng.standard_normal(N_EMBD) * 0.6).astype(np.float32) for il in range(1, N_LAYER + 1)}
    write(os.path.join(out, "cv.gguf"), dirs)
    write(os.path.join(out, "bad.gguf"), {0: dirs[1], 1: dirs[2]})

    # read the file back (not the arrays above) and apply llama.cpp's rules
    r = gguf.GGUFReader(os.path.join(out, "cv.gguf"))
    data = {}
    for t in r.tensors:
        il = int(t.name.split(".")[1])
        assert il > 0 and t.tensor_type == gguf.GGMLQuantizationType.F32
        data[il] = np.array(t.data, dtype=np.float32).reshape(-1)
    first, last = max(a, 1), min(b, N_LAYER - 1)
    specs = []
    for il in range(first, last + 1):
        if il not in data:
            continue
        # float32 values printed exactly; the steer hook multiplies by scale (a power of two
        # in the test, so the product is the same in float and double)
        specs.append({"name": "ref", "per_request": True, "target_modules": [f"model.layers.{il}"],
                      "hook_factory": "libsrt_hook_steer.so:srt_steer_factory",
                      "config": {"vector": [float(x) for x in data[il]], "scale": scale}})
    with open(os.path.join(out, "ref.json"), "w") as f:
        json.dump({"forward_hooks": specs}, f)


if __name__ == "__main__":
    main()
