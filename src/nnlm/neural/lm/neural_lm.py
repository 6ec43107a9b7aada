"""The NPLM's LanguageModel adapter, NeuralLM: NumPy in, float64 NumPy out, the scoring chosen once.

The net itself is nnlm.neural.net.model; this module puts it behind nnlm.lm's interface: log_prob (exact fp32,
bf16 or unnormalized, nnlm.neural.lm.scoring), log_partition, distribution, log_prob_text (the paper's feature
vector for words outside V), long passes scored from the direct connections' per-position tables
(nnlm.neural.lm.direct_tables), and the stateful API begin_state/advance (nnlm.neural.lm.stepper).
ClassNeuralLM (nnlm.neural.lm.class_lm) and EnergyLM (nnlm.neural.net.energy) subclass it.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch

from nnlm import threads
from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.lm import LOG10_E, LanguageModel, LMState, text_contexts
from nnlm.neural.lm.scoring import EVAL_ROWS, EXACT, Scoring, exact_scores, score_rows, softmax_scores, target_scores
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.model_config import ModelConfig

__all__ = ["NeuralLM"]


class NeuralLM(LanguageModel):
    """An NPLM behind the LanguageModel interface: NumPy in, float64 NumPy out, scored in blocks.

    `scoring` (nnlm.neural.lm.scoring) is chosen here, once: exact fp32 (the default), the bf16 product, or
    y[target] without the softmax sum; `with_scoring` gives an adapter over the same net that scores
    another way. A long normalized pass (`long_pass`) is scored exactly from the direct connections'
    per-position tables when they pay and fit, whatever the precision (faster than the bf16 product).
    `distribution` is always the exact softmax, `log_partition` always exact fp32."""

    def __init__(self, net: NPLM, vocab: Vocabulary, pad_token: str, device: str | torch.device = "cpu",
                 scoring: Scoring = EXACT) -> None:
        if net.config.vocab_size != len(vocab):
            raise NnlmError(f"the network has {net.config.vocab_size} outputs but the vocabulary "
                            f"{len(vocab)} words")
        self.check_scoring(scoring)
        self.net = net
        self.vocab = vocab
        self.vocab_size = net.config.vocab_size  # |V|, the outputs' count (equal to len(vocab), checked above)
        self.order = net.config.order
        self.pad_token = pad_token
        self.device = torch.device(device)
        self._scoring = scoring
        self._tables = None  # direct_tables.PositionTables during a long pass that builds them
        self._stepper = None  # (weights version, stepper.NeuralStepper): the stateful API's terms and cache
        self._joined = None   # (key, [W, U, b]): the exact path's output matrix, joined once per weights version
        self.step_cache_bytes: int | None = None  # the stepper's direct-rows cache budget (None: its default)

    @property
    def scoring(self) -> Scoring:
        """How this adapter scores, fixed when it was made (`with_scoring` for another)."""
        return self._scoring

    def with_scoring(self, scoring: Scoring) -> NeuralLM:
        """This model scoring by `scoring`: a new adapter of the same class over the same net (its weights
        shared, not copied); this one is unchanged."""
        other = type(self)(self.net, self.vocab, self.pad_token, self.device, scoring)
        other.step_cache_bytes = self.step_cache_bytes
        return other

    def check_scoring(self, scoring: Scoring) -> None:
        """Raise NnlmError for a Scoring this adapter cannot honour (subclasses refuse what has no meaning
        for their net)."""
        if not isinstance(scoring, Scoring):
            raise NnlmError(f"scoring must be a nnlm.neural.lm.scoring.Scoring, not {type(scoring).__name__}")

    def parameter_count(self) -> int:
        return self.net.config.parameter_count()

    def _check(self, contexts: np.ndarray) -> torch.Tensor:
        contexts = np.asarray(contexts)
        if contexts.ndim != 2 or contexts.shape[1] != self.context_size:
            raise NnlmError(f"contexts must have shape [N, {self.context_size}], got {list(contexts.shape)}")
        if contexts.size and (contexts.min() < 0 or contexts.max() >= self.vocab_size):
            raise NnlmError("contexts hold ids outside the vocabulary")
        return torch.as_tensor(np.ascontiguousarray(contexts, dtype=np.int64), device=self.device)

    def _check_targets(self, targets: np.ndarray, rows: int) -> torch.Tensor:
        targets = np.asarray(targets)
        if targets.shape != (rows,):
            raise NnlmError(f"targets must have shape [{rows}], got {list(targets.shape)}")
        if targets.size and (targets.min() < 0 or targets.max() >= self.vocab_size):
            raise NnlmError("targets hold ids outside the vocabulary")
        return torch.as_tensor(np.ascontiguousarray(targets, dtype=np.int64), device=self.device)

    def log_prob(self, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        return self.log_prob_and_log_z(contexts, targets)[0]

    def log_prob_and_log_z(self, contexts: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(log P(target | context), log Z of each context), float64 [N] each, from one pass: log Z is what
        the pass computed on the way (the exact fp32 path, the per-position tables), None where it computed
        none (bf16 product, unnormalized, a net whose y is b alone)."""
        ctx = self._check(contexts)
        return self._score_ids(ctx, self._check_targets(targets, len(ctx)), self.net.C.detach())

    # Whether the net's scores are one |V|-wide product y = b + W x + U a, which the stateful step and the
    # per-position tables speed up; not for a class-factored output nor the energy net (tanh units per word).
    output_is_one_product = True

    @property
    def _has_product(self) -> bool:
        """y has a |V|-wide product (W or H): the exact and bf16 paths; without one y = b."""
        return self.net.W is not None or self.net.H is not None

    @torch.no_grad()
    def _score_ids(self, ctx: torch.Tensor, targets: torch.Tensor, table: torch.Tensor
                   ) -> tuple[np.ndarray, np.ndarray | None]:
        """`log_prob_and_log_z` where x concatenates rows of `table` (C, or C extended with unknown words'
        features) for the context ids: by the adapter's scoring, or, normalized, exactly from the
        per-position tables when a long pass built them (faster than either product)."""
        self.net.eval()
        if not self.scoring.normalized:
            return target_scores(self.net, ctx, targets, table, EVAL_ROWS), None
        if self._has_product and (self.scoring.precision == "fp32" or self._tables_for(table) is not None):
            return self._exact_scores(ctx, targets, table)
        return softmax_scores(self.net, ctx, targets, table, EVAL_ROWS, bf16=self._has_product), None

    def _exact_scores(self, ctx: torch.Tensor, targets: torch.Tensor | None, table: torch.Tensor
                      ) -> tuple[np.ndarray, np.ndarray | None]:
        """scoring.exact_scores, or direct_tables.scores when a long pass built the tables (same contract)."""
        tables = self._tables_for(table)
        if tables is None:
            return exact_scores(self.net, self._output_weights(), ctx, targets, table, score_rows(len(self.net.b)))
        from nnlm.neural.lm.direct_tables import scores

        log_p, log_z = scores(self.net, tables, table, ctx, targets)
        return log_p.numpy(), None if log_z is None else log_z.numpy()

    @contextmanager
    def long_pass(self, tokens: int) -> Iterator[None]:
        """A long normalized pass (fp32, or bf16: the tables are faster than its product and exact) builds
        the direct connections' per-position tables when they pay and fit (nnlm.neural.lm.direct_tables),
        and frees them after it."""
        from nnlm.neural.lm import direct_tables

        if self._tables is None and self.builds_tables(tokens):
            self._tables = direct_tables.position_tables(self.net, self.net.C)
        try:
            yield
        finally:
            self._tables = None

    def builds_tables(self, tokens: int) -> bool:
        """Whether a long normalized pass over `tokens` tokens builds the per-position tables (they pay and
        fit): what `long_pass` does, and what the reproduce planner times a pass by."""
        from nnlm.neural.lm import direct_tables

        return (self.output_is_one_product and self.scoring.normalized
                and direct_tables.tables_pay(self.net, len(self.net.C), tokens, self.device))

    def _tables_for(self, table: torch.Tensor):
        """The per-position tables, if built from `table` and the weights as they are now."""
        from nnlm.neural.lm.direct_tables import weights_version

        if self._tables is None or table.data_ptr() != self.net.C.data_ptr() or len(table) != len(self.net.C):
            return None
        if self._tables.version != weights_version(self.net):  # trained since: stale
            self._tables = None
            return None
        return self._tables

    def _output_weights(self) -> torch.Tensor:
        """[W, U, b] as one [|V|, K + 1] matrix (zs' order, then b), joined once for the weights as they are
        (a 20 MB copy at every log_prob call for MLP1 otherwise, which dominated short calls: a decoder's
        beam, a server's request). Keyed by each matrix's storage and in-place version, so training or a
        move to another device makes a new one."""
        mats = [w for w in (self.net.W, self.net.U) if w is not None] + [self.net.b[:, None]]
        key = tuple((w.data_ptr(), w._version, str(w.device)) for w in mats)
        if self._joined is None or self._joined[0] != key:
            self._joined = key, torch.cat([w.detach() for w in mats], dim=1)
        return self._joined[1]

    @torch.no_grad()
    def log_partition(self, contexts: np.ndarray) -> np.ndarray:
        """log Z = log sum_w exp(y_w), float64 [N]: 0 for a perfectly self-normalized model."""
        ctx = self._check(contexts)
        self.net.eval()
        if self._has_product:
            return self._exact_scores(ctx, None, self.net.C.detach())[0]
        out = np.empty(len(ctx), dtype=np.float64)
        for lo in range(0, len(ctx), EVAL_ROWS):
            threads.check()
            out[lo:lo + EVAL_ROWS] = torch.logsumexp(self.net(ctx[lo:lo + EVAL_ROWS]), 1).double().cpu().numpy()
        return out

    @torch.no_grad()
    def distribution(self, contexts: np.ndarray) -> np.ndarray:
        ctx = self._check(contexts)
        self.net.eval()
        out = np.empty((len(ctx), self.vocab_size), dtype=np.float64)
        for lo in range(0, len(ctx), EVAL_ROWS):
            threads.check()
            y = self.net(ctx[lo:lo + EVAL_ROWS]).double()
            out[lo:lo + len(y)] = torch.softmax(y, dim=1).cpu().numpy()
        return out

    def word_feature_matrix(self) -> np.ndarray:
        """C as float64 [|V|, m]: the learned word feature vectors."""
        return self.net.C.detach().double().cpu().numpy()

    @torch.no_grad()
    def log_prob_text(self, tokens: Sequence[str]) -> np.ndarray:
        """log P of each token of a user's text given the tokens before it (the start padded).

        Words outside V get the paper's feature vector C(j) = sum_i C(i) P(i | context), computed
        at their first occurrence from the context there, and keep it for later occurrences; as
        targets they are scored as `<unk>` (the output layer has no unit for them).
        """
        self.net.eval()
        k, v = self.context_size, self.vocab_size
        new_words: dict[str, int] = {}
        ids = np.empty(len(tokens), dtype=np.int64)
        for pos, tok in enumerate(tokens):  # string lookup: one dict access per token, no tensor work
            if tok in self.vocab:
                ids[pos] = self.vocab.id(tok)
            else:
                ids[pos] = v + new_words.setdefault(tok, len(new_words))
        windows = text_contexts(ids, k, self.vocab.id(self.pad_token))  # row t: the context of token t
        table = torch.cat([self.net.C.detach(), self.net.C.new_zeros(len(new_words), self.config.features)])
        first = np.flatnonzero(ids >= v)
        first = first[np.unique(ids[first], return_index=True)[1]]
        for pos in np.sort(first):  # one forward per distinct unknown word, in order of appearance
            ctx = torch.as_tensor(windows[pos][None, :], device=self.device)
            table[ids[pos]] = self.net.expected_features(x=self.net.embed(ctx, table))[0]
        targets = torch.as_tensor(np.where(ids >= v, self.vocab.unk_id, ids), device=self.device)
        return self._score_ids(torch.as_tensor(windows, device=self.device), targets, table)[0]

    @property
    def config(self) -> ModelConfig:
        return self.net.config

    # --- the stateful API: partial sums in the state, one U product a step (nnlm.neural.lm.stepper) ---

    @property
    def steps_incrementally(self) -> bool:
        """Whether begin_state/advance keep partial sums (exact scoring, fp32 or float64 nets with W or H);
        unnormalized and bf16 scorings take the default path through log_prob, so their numbers agree."""
        return (self.scoring.exact and self._has_product and self.output_is_one_product
                and getattr(self.net, "P", None) is None  # (the class pair's row: no per-position sums)
                and self._step_terms_fit())

    def _step_terms_fit(self) -> bool:
        """Whether the stepper's direct-connection terms fit its memory bound (`stepper.terms_fit`); a wider net
        steps through log_prob, the same numbers recomputed each step."""
        from nnlm.neural.lm.stepper import terms_fit

        return terms_fit(self.net)

    def state_owner(self) -> str:
        """The default owner, and the weights' version: a state's sums are stale once the net is trained."""
        from nnlm.neural.lm.direct_tables import weights_version

        return f"{super().state_owner()}/{hash(weights_version(self.net)):x}"

    def _current_stepper(self):
        from nnlm.neural.lm.direct_tables import available_bytes, weights_version
        from nnlm.neural.lm.stepper import CACHE_BYTES, CACHE_SHARE_OF_FREE, NeuralStepper

        version = weights_version(self.net)
        if self._stepper is None or self._stepper[0] != version:
            budget = self.step_cache_bytes
            if budget is None:
                free = available_bytes()
                budget = CACHE_BYTES if free is None else min(CACHE_BYTES, int(CACHE_SHARE_OF_FREE * free))
            self.net.eval()
            self._stepper = version, NeuralStepper(self.net, self.vocab_size, self.device, budget)
        return self._stepper[1]

    @torch.no_grad()
    def begin_state(self, batch: int = 1, history: Sequence[int] | np.ndarray | None = None) -> LMState:
        state = super().begin_state(batch, history)
        if not self.steps_incrementally:
            return state
        threads.check()
        state.extra = self._current_stepper().start(state.context)
        return state

    @torch.no_grad()
    def advance(self, state: LMState, words: Sequence[int] | np.ndarray,
                log10: bool = False) -> tuple[np.ndarray, LMState]:
        if not self.steps_incrementally:
            return super().advance(state, words, log10)
        words = self.check_step(state, words)
        threads.check()
        stepper = self._current_stepper()
        if set(state.extra) != ({"hidden"} if self.net.H is not None else set()):
            raise NnlmError("this state was not made by this model (use model.begin_state())")
        log_probs = stepper.log_probs(state, words, self._tables_for(self.net.C.detach())).numpy()
        after = self.shift_state(state, words)
        after.extra = stepper.shift(state.extra, words)
        return (log_probs * LOG10_E if log10 else log_probs), after

