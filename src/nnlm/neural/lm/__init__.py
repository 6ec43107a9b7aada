"""A trained net behind the LanguageModel interface: NeuralLM and its class-factored twin, the scoring chosen once
at load (scoring.py), word-by-word states (stepper.py), exact long-text scoring with direct connections
(direct_tables.py), and `nnlm eval` (evaluate.py).

(No imports here.)"""
