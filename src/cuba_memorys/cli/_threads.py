"""Imported first by the CLI, before anything loads numpy: one OpenBLAS thread.

The server's matrix work per query is one small matrix-vector product (the exact vector scan,
or re-scoring the HNSW candidates). OpenBLAS splits even that across every core, and on a small
machine those threads spin against the embedding model and the SQLite work of the same query:
measured on the 2-core machine under load, a 10k-row search went from p50 63 ms to 33 ms with
one thread (docs/benchmarks.md, "Speed at scale"). A user's own setting wins.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
