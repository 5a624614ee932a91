"""Traces in: profiler traces read (reader.py), kernels classified (classify.py), compared with and fitted to the
model (compare.py); docs/model.md §17."""
