"""Dropout whose mask is made by a compiled counter-based generator, seeded from torch's RNG.

Why: torch's CPU dropout draws one Mersenne-twister number per cell (`bernoulli_`); at MLP1's
sampled step (x [256, 240] and the hidden layer [256, 50]) the two calls took 10% of the step,
more than its optimizer. Here one 63-bit seed is drawn from torch's global generator per call (so
a checkpoint's RNG state still resumes a run exactly, and `torch.manual_seed` still fixes it), and
cell i is kept when the top 24 bits of splitmix64(seed + i golden) reach p 2^24 (splitmix64: Steele,
Lea & Flood 2014, a bijective mixer whose outputs pass BigCrush): a Bernoulli(1 - p') mask with
p' = round(p 2^24) / 2^24, within 3e-8 of p, scaled by 1 / (1 - p'). The backward pass is autograd's
of a product with that mask, as torch's dropout is. Another device, or p of 0 or 1, takes F.dropout.
"""
from __future__ import annotations

import numba
import numpy as np
import torch
import torch.nn.functional as F

BITS = 24  # uniform bits per cell compared with p
COMPILED = True  # False: torch's F.dropout everywhere (benchmarks/sampled_step.py times both)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def fill_mask(out, seed, cut, scale):
    """out[i] = scale where the cell's 24-bit uniform is at least `cut`, else 0 (out: float32 or float64)."""
    golden = np.uint64(0x9E3779B97F4A7C15)
    m1, m2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
    base = np.uint64(seed)
    keep, drop = out.dtype.type(scale), out.dtype.type(0.0)
    for i in range(len(out)):
        z = base + np.uint64(i + 1) * golden
        z = (z ^ (z >> np.uint64(30))) * m1
        z = (z ^ (z >> np.uint64(27))) * m2
        z = z ^ (z >> np.uint64(31))
        out[i] = keep if (z >> np.uint64(64 - BITS)) >= cut else drop


def dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """Training-mode dropout of x with rate p (see the module docstring)."""
    cut = round(p * (1 << BITS))
    plain = x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float64)
    if not COMPILED or plain or not 0 < cut < (1 << BITS):
        return F.dropout(x, p, training=True)
    seed = int(torch.randint(0, 2**63 - 1, (1,)))
    mask = torch.empty(x.shape, dtype=x.dtype)
    fill_mask(mask.view(-1).numpy(), seed, cut, 1.0 / (1.0 - cut / (1 << BITS)))
    return x * mask
