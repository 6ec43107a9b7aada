"""Training speed of the recurrent NPLM (`nnlm train --preset lstm`: nnlm.neural.run.recurrent_trainer's step)
against the LSTM reference's step (nnlm.reproduce.lstm_reference) on Brown, in one run: the same shape (2 x 200,
tied, 20 streams x 35 steps), windows of each timed alternately, so the other processes' load falls on both.

    NLTK_DATA=../shared/nltk_data python benchmarks/recurrent_speed.py --windows 8 --threads 1

Prints training tokens/s of each and their ratio, the CPU and the load.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch
from host import cpu_name
from torch import nn

from nnlm.data import load_corpus
from nnlm.neural.net.nets import build_net
from nnlm.neural.net.presets import preset
from nnlm.neural.net.softmax_loss import softmax_cross_entropy
from nnlm.neural.run.optim import Adam
from nnlm.neural.run.recurrent_trainer import GRADIENT_CLIP
from nnlm.reproduce.lstm_reference import LstmRecipe, TiedLstm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=8, help="windows timed for each (after one warm-up)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    corpus = load_corpus("brown")
    v, rows, steps = len(corpus.vocab), 20, 35
    ids = torch.as_tensor(corpus.train[:rows * (steps * (args.windows + 1) + 1)].astype(np.int64))
    grid = ids[:rows * (len(ids) // rows)].view(rows, -1)
    torch.manual_seed(0)
    net = build_net(preset("lstm", v), 0.2, 0.2)
    optimizer = Adam(net, 2e-3, 0.05)
    reference = TiedLstm(v, LstmRecipe())
    resets = (grid == corpus.pad_id).numpy()
    carry, ref_state = None, None
    times = {"nnlm": 0.0, "reference": 0.0}
    for w in range(args.windows + 1):
        inputs, targets = grid[:, w * steps:(w + 1) * steps], grid[:, w * steps + 1:(w + 1) * steps + 1]
        started = time.perf_counter()
        net.train()
        a, x, carry = net.read(inputs, resets[:, w * steps:(w + 1) * steps], carry)
        carry = carry.detach()
        zs = [z.reshape(-1, z.shape[-1]) for z in net.output_operands(a, x)]
        loss = softmax_cross_entropy(zs, net.output_weights(), net.b, targets.reshape(-1))
        net.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(net.parameters(), GRADIENT_CLIP)
        optimizer.step(0, rows * steps)
        middle = time.perf_counter()
        reference.train()
        if ref_state is not None:
            ref_state = tuple(s.detach() for s in ref_state)
        log_probs, ref_state = reference(inputs.t(), ref_state)
        ref_loss = -log_probs.gather(2, targets.t().unsqueeze(2)).mean()
        reference.zero_grad(set_to_none=True)
        ref_loss.backward()
        nn.utils.clip_grad_norm_(reference.parameters(), 0.25)
        with torch.no_grad():
            for p in reference.parameters():
                p.add_(p.grad, alpha=-20.0)
        ended = time.perf_counter()
        if w:  # (the first window of each: warm-up)
            times["nnlm"] += middle - started
            times["reference"] += ended - middle
    tokens = rows * steps * args.windows
    rate = {k: tokens / t for k, t in times.items()}
    print(f"CPU {cpu_name()}, {args.threads} thread(s), load {os.getloadavg()[0]:.2f}; {args.windows} windows of "
          f"{rows} x {steps} tokens each")
    print(f"nnlm --preset lstm (Adam, fused softmax loss): {rate['nnlm']:,.0f} tokens/s")
    print(f"LSTM reference (SGD, log-softmax):              {rate['reference']:,.0f} tokens/s")
    print(f"ratio nnlm / reference: {rate['nnlm'] / rate['reference']:.2f}")


if __name__ == "__main__":
    main()
