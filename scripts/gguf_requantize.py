#!/usr/bin/env python3
"""Rewrites a GGUF with every tensor of one quantized type requantized to another (gguf-py's
quantizer), the rest and the metadata unchanged.

Why: the exact path has kernels per weight type, and a model in each type is needed to check
them against HF transformers end to end (scripts/hf_unseen_chats.py --model OUT). The weights
are the input file's values dequantized and quantized again, so the model is the same up to
that rounding; HF loads OUT itself, so both sides compute with the same weights.

    scripts/gguf_requantize.py IN.gguf OUT.gguf [--from Q4_1] [--to Q4_0]

Needs the gguf package (and numpy).
"""
import argparse
import os
import sys

import gguf
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_to_f32 import copy_metadata  # noqa: E402

FILE_TYPES = {"Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0, "Q4_1": gguf.LlamaFileType.MOSTLY_Q4_1,
              "Q5_0": gguf.LlamaFileType.MOSTLY_Q5_0, "Q5_1": gguf.LlamaFileType.MOSTLY_Q5_1,
              "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--from", dest="src_type", default="Q4_1", choices=sorted(FILE_TYPES))
    ap.add_argument("--to", dest="dst_type", default="Q4_0", choices=sorted(FILE_TYPES))
    args = ap.parse_args()
    src_t = gguf.GGMLQuantizationType[args.src_type]
    dst_t = gguf.GGMLQuantizationType[args.dst_type]
    reader = gguf.GGUFReader(args.src)
    writer = copy_metadata(reader, args.dst, FILE_TYPES[args.dst_type])
    tensors = []
    for t in reader.tensors:
        if t.tensor_type == src_t:
            # numpy order: the reversed GGUF dims (rows last), as the reader gives them
            f32 = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
            data, ty = gguf.quants.quantize(f32.reshape([int(d) for d in reversed(t.shape)]), dst_t), dst_t
        else:
            data, ty = np.asarray(t.data), t.tensor_type
        tensors.append(data)
        writer.add_tensor_info(t.name, data.shape, data.dtype, data.nbytes, ty)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for data in tensors:
        writer.write_tensor_data(data)
    writer.close()


if __name__ == "__main__":
    main()
