"""The GGUF token embeddings dequantized by gguf-py and by verispec (quant.dequantize_raw's loop), timed, bits compared.

    python bench/results/s48/dequant_embeddings.py
"""
import time, numpy as np, gguf
from verispec.model.gguf_index import Index
from verispec.model import quant
import glob
from verispec.model.loader import home
for f in sorted(glob.glob(str(home() / '**/*.gguf'), recursive=True)):
    for t in Index(f).tensors:
        if t.name != 'token_embd.weight': continue
        kind, n, k = t.tensor_type.name, int(t.shape[1]), int(t.shape[0])
        t0 = time.perf_counter(); ref = np.array(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        t1 = time.perf_counter()
        out = quant.dequantize_raw(t.data, kind, n, k)
        t2 = time.perf_counter()
        print(f.split('/')[-1], kind, n, k, f"gguf-py {t1-t0:.2f} s, ours {t2-t1:.2f} s, equal bits:",
              np.array_equal(ref.reshape(n, k).view(np.uint32), out.numpy().view(np.uint32)))
