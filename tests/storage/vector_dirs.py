"""Partition directories from the spec's vectors, materialised for the storage tests."""
from __future__ import annotations

import os
import pathlib

from spec_vectors import VECTORS_DIR as VECTORS


def copy_vector_dir(name: str, target: pathlib.Path) -> pathlib.Path:
    """Write a vector partition directory (`.hex` files decoded) to `target`."""
    source = VECTORS / name
    target.mkdir(parents=True)
    for path in source.iterdir():
        if path.name.endswith(".json"):
            continue
        if path.name.endswith(".hex"):
            data = bytes.fromhex("".join(path.read_text().split()))
            (target / path.name[:-4]).write_bytes(data)
        else:
            (target / path.name).write_bytes(path.read_bytes())
    for path in target.iterdir():
        # The vectors are read-only; recovery and close rewrite files.
        os.chmod(path, 0o644)
    return target
