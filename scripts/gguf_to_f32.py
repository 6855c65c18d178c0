#!/usr/bin/env python3
"""Rewrites a GGUF with every tensor dequantized to F32, metadata unchanged (file_type ALL_F32).

Why: a comparison of two engines on a quantized file also compares how each rounds its
activations (llama.cpp's CPU path quantizes them to 8 bits for Q4_1 and Q8_0 weights, ngx_srt's
exact path keeps f32). On the F32 rewrite both engines multiply the same f32 weights by f32
activations, so what is left between them is summation order: the comparison then isolates
what it means to compare (a control vector, a hook), not the numerics of the quantized path.
The weights are the quantized file's values, dequantized by gguf-py, so the model is the same.

    scripts/gguf_to_f32.py IN.gguf OUT.gguf
"""
import sys

import gguf
import numpy as np

SKIP = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count", "general.architecture"}


def copy_metadata(reader, path, file_type):
    """A writer for path with reader's metadata, general.file_type set to file_type"""
    writer = gguf.GGUFWriter(path, reader.get_field("general.architecture").contents())
    for field in reader.fields.values():
        if field.name in SKIP:
            continue
        if field.name == "general.file_type":
            writer.add_uint32(field.name, int(file_type))
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    return writer


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: gguf_to_f32.py IN.gguf OUT.gguf")
    reader = gguf.GGUFReader(sys.argv[1])
    writer = copy_metadata(reader, sys.argv[2], gguf.LlamaFileType.ALL_F32)
    tensors = []
    for t in reader.tensors:
        if t.tensor_type == gguf.GGMLQuantizationType.F32:
            data = np.asarray(t.data, dtype=np.float32)
        else:
            data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        # numpy order: the reversed GGUF dims (rows last), as the reader gives them
        data = data.reshape([int(d) for d in reversed(t.shape)])
        tensors.append((t.name, data))
        writer.add_tensor_info(t.name, data.shape, data.dtype, data.nbytes,
                               gguf.GGMLQuantizationType.F32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, data in tensors:
        writer.write_tensor_data(data)
    writer.close()


if __name__ == "__main__":
    main()
