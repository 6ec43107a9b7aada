"""The network: the NPLM read top to bottom (model.py), its architecture (ModelConfig), its output layers (the
paper's softmax, class-factored, sampled, kept side by side), the energy net of section 5.1, and its word rows.

Nothing here knows about run directories or processes; the run (nnlm.neural.run) builds a net from a ModelConfig
(nets.py) and trains it. (No imports here: the package opens without torch.)"""
