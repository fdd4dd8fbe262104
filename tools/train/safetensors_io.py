"""Minimal safetensors writer/reader (F16/F32, and I32 for index tensors), so training needs no
extra packages.

Layout: 8-byte little-endian header length, JSON header {name: {dtype, shape, data_offsets}, ...,
"__metadata__": {"format": "pt"}} padded with spaces to a multiple of 8, then the tensors' bytes
back to back (offsets relative to the end of the header)."""

import json
import struct

import numpy as np
import torch

_DTYPES = {torch.float16: ('F16', np.float16), torch.float32: ('F32', np.float32), torch.int32: ('I32', np.int32)}
_NP = {'F16': np.float16, 'F32': np.float32, 'I32': np.int32}


def save(tensors, path, dtype=torch.float16):
    """Float tensors are written as `dtype`; int32 tensors as I32."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        as_dtype = dtype if t.is_floating_point() else t.dtype
        code, npdt = _DTYPES[as_dtype]
        data = t.detach().to('cpu', as_dtype).contiguous().numpy().astype(npdt, copy=False).tobytes()
        header[name] = {'dtype': code, 'shape': list(t.shape), 'data_offsets': [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header['__metadata__'] = {'format': 'pt'}
    hjson = json.dumps(header, separators=(',', ':')).encode('utf-8')
    hjson += b' ' * (-len(hjson) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)


def load(path):
    """{name: tensor}: float tensors as float32, I32 ones as int32."""
    with open(path, 'rb') as f:
        raw = f.read()
    (n,) = struct.unpack('<Q', raw[:8])
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == '__metadata__':
            continue
        a, b = info['data_offsets']
        arr = np.frombuffer(raw[base + a:base + b], dtype=_NP[info['dtype']]).reshape(info['shape'])
        out[name] = torch.from_numpy(arr.astype(np.int32 if info['dtype'] == 'I32' else np.float32))
    return out
