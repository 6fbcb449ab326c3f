"""Backends: the bottom layer (errors, tensors, devices, model runtimes).

Nothing here imports torch or onnxruntime at import time; runtimes load lazily on first use.
"""
