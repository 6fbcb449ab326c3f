"""Backends: the bottom layer (errors, tensors, devices, model runtimes).

Nothing here imports torch or onnxruntime at import time; runtimes load lazily on first use.
"""

from backends.pure_python import install_if_asked

install_if_asked()  # REDISAI_PURE_PYTHON=1: the .py sources even where a compiled .so sits beside them
