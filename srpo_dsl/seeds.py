"""Seeds of every random draw, derived by hashing what the draw is for: the same on every machine."""

from __future__ import annotations

import hashlib

SEED_BITS = 63  # a seed is a non-negative int64 (torch generators, vLLM and the hf engine's noise take it)


def seed_of(*parts: object) -> int:
    """A stable 63-bit seed from any parts (same on every machine and run; distinct parts collide with
    probability about 2^-63 per pair)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> (64 - SEED_BITS)
