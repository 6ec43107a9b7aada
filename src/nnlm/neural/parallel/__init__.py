"""The paper's parallel training on real engines: Hogwild workers on shared memory (hogwild.py), and, on
torch.distributed, synchronous data-parallel and the parameter-parallel output layer (ranks.py, vocab_parallel.py,
with distributed.py's process groups). Each is a trainer of nnlm.neural.run's loop.

(No imports here: single-process training never opens this package.)"""
