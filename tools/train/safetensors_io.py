"""Minimal safetensors writer/reader (F16/F32), so training needs no extra packages.

Layout: 8-byte little-endian header length, JSON header {name: {dtype, shape, data_offsets}, ...,
"__metadata__": {"format": "pt"}} padded with spaces to a multiple of 8, then the tensors' bytes
back to back (offsets relative to the end of the header)."""

import json
import struct

import numpy as np
import torch

_DTYPES = {torch.float16: ('F16', np.float16), torch.float32: ('F32', np.float32)}
_NP = {'F16': np.float16, 'F32': np.float32}


def save(tensors, path, dtype=torch.float16):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        code, npdt = _DTYPES[dtype]
        data = t.detach().to('cpu', dtype).contiguous().numpy().astype(npdt, copy=False).tobytes()
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
    """{name: float32 tensor}."""
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
        out[name] = torch.from_numpy(arr.astype(np.float32))
    return out
