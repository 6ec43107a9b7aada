"""The neural probabilistic language model of Bengio et al. (2003), and its LanguageModel adapter.

    x = [C(w_{t-n+1}), ..., C(w_{t-1})]          (n-1 word feature vectors, concatenated)
    y = b + W x + U tanh(d + H x)                 (unnormalized log-probabilities over V)
    P(w_t = i | context) = softmax(y)_i

Parameters and shapes (as in the paper): C |V|xm, H hx(n-1)m, d h, U |V|xh, W |V|x(n-1)m, b |V|.
h = 0 means no hidden layer (no H, d, U); direct=False means W = 0 (no W parameter).
The context columns are oldest-first, like every nnlm model's contexts, so x holds C(w_{t-n+1})
first; the order of the blocks of x does not change the model family.
The variants past the paper (more hidden layers, layer normalisation, residual layers, a wide-context
branch) are fields of ModelConfig (nnlm.neural.model_config); their defaults are the paper's net.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from nnlm import threads
from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.lm import LOG10_E, LanguageModel, LMState, text_contexts
from nnlm.neural.dropout import dropout as seeded_dropout
from nnlm.neural.model_config import ModelConfig
from nnlm.neural.scoring import EXACT, Scoring, exact_scores, softmax_scores, target_scores

__all__ = ["EVAL_ROWS", "NPLM", "ModelConfig", "NPLMParameters", "NeuralLM", "score_rows"]

EVAL_ROWS = 256  # contexts per forward pass of the bf16, unnormalized and distribution paths
SCORE_BYTES = 64 << 20  # exact fp32 scoring: the reused [rows, |V|] logits buffer (rows = SCORE_BYTES / 4|V|):
# larger blocks keep the output product near the CPU's large-matrix rate; one buffer for the whole call costs
# no page faults (a fresh 73 MB tensor per block was mmap'd and faulted anew every time)


def score_rows(vocab_size: int) -> int:
    """Rows per block of exact scoring: the [rows, |V|] fp32 buffer fills SCORE_BYTES (at least 16 rows)."""
    return max(16, SCORE_BYTES // (4 * vocab_size))


class NPLMParameters(nn.Module):
    """The NPLM's parameters and its one formula, with the output layer (b, W, U) holding `rows`
    words: all of V in an NPLM, one rank's slice of V in nnlm.neural.vocab_parallel."""

    def __init__(self, config: ModelConfig, rows: int, dropout_x: float = 0.0, dropout_h: float = 0.0) -> None:
        super().__init__()
        self.config = config
        self.dropout_x = dropout_x  # modern recipe only: dropout on x and on the hidden layer
        self.dropout_h = dropout_h
        v, h, m, k = config.vocab_size, config.hidden, config.features, config.input_size
        self.C = nn.Parameter(torch.empty(v, m))
        self.b = nn.Parameter(torch.empty(rows))
        self.W = nn.Parameter(torch.empty(rows, k)) if config.direct else None
        if h > 0:
            self.H = nn.Parameter(torch.empty(h, k))
            self.d = nn.Parameter(torch.empty(h))
            self.U = nn.Parameter(torch.empty(rows, h))
        else:
            self.H = self.d = self.U = None
        for layer in range(2, config.layers + 1):  # the deeper hidden layers: H2, d2, H3, d3, ...
            setattr(self, f"H{layer}", nn.Parameter(torch.empty(h, h)))
            setattr(self, f"d{layer}", nn.Parameter(torch.empty(h)))
        self.gains = [f"g{layer}" for layer in range(1, config.layers + 1)] if config.layer_norm else []
        for name in self.gains:
            setattr(self, name, nn.Parameter(torch.empty(h)))
        self.A = nn.Parameter(torch.empty(config.distant)) if config.distant else None
        pairs = config.class_context
        self.P = nn.Parameter(torch.empty(pairs * pairs, pairs)) if pairs else None
        if pairs:  # the class of every word, and last the class a word outside V (the paper's OOV vector) counts as
            self.register_buffer("context_class", torch.zeros(config.vocab_size + 1, dtype=torch.int64))
            self.register_load_state_dict_post_hook(_check_context_classes)

    def deeper_layers(self) -> list[tuple[nn.Parameter, nn.Parameter]]:
        """(H_l, d_l) of the hidden layers after the first."""
        return [(getattr(self, f"H{k}"), getattr(self, f"d{k}")) for k in range(2, self.config.layers + 1)]

    def decayed_parameters(self) -> list[nn.Parameter]:
        """Weights and C: what the paper's weight decay applies to (not the biases b, d, nor gains and A)."""
        return ([p for p in (self.C, self.W, self.H, self.U, self.P) if p is not None]
                + [H for H, _ in self.deeper_layers()])

    def bias_parameters(self) -> list[nn.Parameter]:
        return ([p for p in (self.b, self.d) if p is not None] + [d for _, d in self.deeper_layers()]
                + [getattr(self, g) for g in self.gains] + ([self.A] if self.A is not None else []))

    def features(self, contexts: torch.Tensor) -> torch.Tensor:
        """x: [N, n-1] word ids -> [N, input_size] feature vectors (see `embed`)."""
        return self.embed(contexts, self.C)

    def embed(self, contexts: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        """x from the rows of `table` (C, or C with unknown words' features) that `contexts` [N, n-1] index;
        with class-pair features, the last two context words' pair's row of P appended."""
        x = self.context_input(F.embedding(contexts, table))
        if self.P is None:
            return x
        return torch.cat([x, F.embedding(self.class_pairs(contexts), self.P)], dim=1)

    def class_pairs(self, contexts: torch.Tensor) -> torch.Tensor:
        """c1 K + c2 [N] for the classes (c1, c2) of the last two context words (ids past V: words outside V)."""
        classes = self.context_class[contexts[:, -2:].clamp(max=self.config.vocab_size)]
        return classes[:, 0] * self.config.class_context + classes[:, 1]

    @torch.no_grad()
    def set_context_classes(self, classes: np.ndarray | torch.Tensor, unknown: int) -> None:
        """Put in the class of every word of V and the class of a word outside V (`unknown`'s)."""
        classes = torch.as_tensor(np.asarray(classes), dtype=torch.int64)
        k = self.config.class_context
        if len(classes) != self.config.vocab_size or int(classes.min()) < 0 or int(classes.max()) >= k:
            raise NnlmError(f"the class-pair features need {self.config.vocab_size} class ids from 0 to {k - 1}")
        self.context_class.copy_(torch.cat([classes, classes[unknown:unknown + 1]]).to(self.context_class.device))

    def context_input(self, vectors: torch.Tensor) -> torch.Tensor:
        """x from the context words' feature vectors [N, n-1, m] (oldest first): their concatenation; with
        the wide-context branch, sum_j A_j C(older word j) followed by the `local` nearest, concatenated."""
        if self.A is None:
            return vectors.flatten(1)
        distant = self.config.distant
        older = torch.einsum("j,njm->nm", self.A, vectors[:, :distant])
        return torch.cat([older, vectors[:, distant:].flatten(1)], dim=1)

    def hidden_output(self, x: torch.Tensor, dropout: bool = False) -> torch.Tensor:
        """The last hidden layer's output: a_1 = tanh(d + H x), then a_l = tanh(d_l + H_l a_{l-1})
        (+ a_{l-1} when residual); with layer norm, H_l a is normalised and scaled by g_l before d_l.
        `dropout`: on every layer's output (training only)."""
        layers = [(self.H, self.d)] + self.deeper_layers()
        a = x
        for index, (H, d) in enumerate(layers):
            if self.gains:
                out = torch.tanh(F.layer_norm(a @ H.t(), H.shape[:1]) * getattr(self, self.gains[index]) + d)
            else:
                out = torch.tanh(torch.addmm(d, a, H.t()))
            if dropout and self.dropout_h > 0:
                out = seeded_dropout(out, self.dropout_h)
            a = a + out if self.config.residual and index > 0 else out
        return a

    def hidden_from_preactivation(self, z: torch.Tensor) -> torch.Tensor:
        """`hidden_output` (eval mode) from the first layer's H x [N, h] already summed: what a stepped
        state keeps (nnlm.neural.stepper), so a step does not multiply the whole context by H again."""
        a = torch.tanh((F.layer_norm(z, z.shape[1:]) * self.g1 if self.gains else z) + self.d)
        for index, (H, d) in enumerate(self.deeper_layers(), start=1):
            if self.gains:
                out = torch.tanh(F.layer_norm(a @ H.t(), H.shape[:1]) * getattr(self, self.gains[index]) + d)
            else:
                out = torch.tanh(torch.addmm(d, a, H.t()))
            a = a + out if self.config.residual else out
        return a

    def output_operands_from_features(self, x: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """(zs, ws) with y = b + sum_j zs[j] ws[j]^T: x with W, the hidden output with U; dropout on x and
        on the hidden layers when training. The one place the hidden layers are computed."""
        if self.training and self.dropout_x > 0:
            x = seeded_dropout(x, self.dropout_x)
        zs, ws = ([x], [self.W]) if self.W is not None else ([], [])
        if self.H is not None:
            zs.append(self.hidden_output(x, dropout=self.training))
            ws.append(self.U)
        return zs, ws

    def logits_from_features(self, x: torch.Tensor,
                             shared: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
        """y = b + W x + U a(x), [N, rows] (a: `hidden_output`); dropout on x and a when training.
        `shared` (vocab-parallel) wraps x and tanh(.) where they meet this module's output rows, so
        that backward sums their gradients over the ranks that hold the other rows."""
        y = self.b.expand(x.shape[0], -1)
        for z, w in zip(*self.output_operands_from_features(x), strict=True):
            y = torch.addmm(y, shared(z) if shared else z, w.t())
        return y


def _check_context_classes(net: NPLMParameters, _keys) -> None:
    """After load_state_dict: a class map outside 0 .. K-1 (a damaged model file) is one clear error."""
    classes, k = net.context_class, net.config.class_context
    if classes.device.type != "meta" and len(classes) and (int(classes.min()) < 0 or int(classes.max()) >= k):
        raise NnlmError(f"the model's context classes must be class ids from 0 to {k - 1}")


class NPLM(NPLMParameters):
    """y = b + W x + U tanh(d + H x) over x = concatenated C rows of the context words."""

    def __init__(self, config: ModelConfig, dropout_x: float = 0.0, dropout_h: float = 0.0) -> None:
        super().__init__(config, config.vocab_size, dropout_x, dropout_h)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """"Random, like neural network weights" (the paper gives no scale): U(-1/sqrt(fan_in), +)
        for H, U, W; small uniform features C; zero biases."""
        with torch.no_grad():
            self.C.uniform_(-0.1, 0.1)
            self.b.zero_()
            for weight in (self.W, self.H, self.U):
                if weight is not None:
                    bound = 1.0 / math.sqrt(weight.shape[1])
                    weight.uniform_(-bound, bound)
            if self.d is not None:
                self.d.zero_()
            for H, d in self.deeper_layers():
                bound = 1.0 / math.sqrt(H.shape[1])
                H.uniform_(-bound, bound)
                d.zero_()
            for name in self.gains:
                getattr(self, name).fill_(1.0)
            if self.A is not None:
                self.A.fill_(1.0 / len(self.A))
            if self.P is not None:
                self.P.uniform_(-0.1, 0.1)

    def forward(self, contexts: torch.Tensor) -> torch.Tensor:
        """Unnormalized log-probabilities y [N, |V|] of the next word for contexts [N, n-1]."""
        return self.logits_from_features(self.features(contexts))

    def output_operands(self, contexts: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The output layer's operands for contexts [N, n-1], for a loss that multiplies them as one
        product (`softmax_loss`); see `output_operands_from_features`."""
        return self.output_operands_from_features(self.features(contexts))

    def target_logits(self, x: torch.Tensor, targets: torch.Tensor, hidden: torch.Tensor | None = None
                      ) -> torch.Tensor:
        """y[i, targets[i]] [N] from the targets' rows of W, U, b only: no |V|-wide product (eval mode).
        `hidden`: the last hidden layer's output when the caller has it (a stepped state), else from x."""
        y = self.b[targets]
        if self.W is not None:
            y = y + (x * self.W[targets]).sum(1)
        if self.H is not None:
            y = y + ((self.hidden_output(x) if hidden is None else hidden) * self.U[targets]).sum(1)
        return y

    def expected_features(self, contexts: torch.Tensor | None = None, x: torch.Tensor | None = None) -> torch.Tensor:
        """sum_i C(i) P(i | context), [N, m]: the paper's feature vector for a word outside V."""
        logits = self.logits_from_features(self.features(contexts) if x is None else x)
        return torch.softmax(logits.double(), dim=1).to(self.C.dtype) @ self.C


class NeuralLM(LanguageModel):
    """An NPLM behind the LanguageModel interface: NumPy in, float64 NumPy out, scored in blocks.

    `scoring` (nnlm.neural.scoring) is chosen here, once: exact fp32 (the default), the bf16 product, or
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
            raise NnlmError(f"scoring must be a nnlm.neural.scoring.Scoring, not {type(scoring).__name__}")

    def parameter_count(self) -> int:
        return self.net.config.parameter_count()

    def _check(self, contexts: np.ndarray) -> torch.Tensor:
        contexts = np.asarray(contexts)
        if contexts.ndim != 2 or contexts.shape[1] != self.context_size:
            raise NnlmError(f"contexts must have shape [N, {self.context_size}], got {list(contexts.shape)}")
        if contexts.size and (contexts.min() < 0 or contexts.max() >= len(self.vocab)):
            raise NnlmError("contexts hold ids outside the vocabulary")
        return torch.as_tensor(np.ascontiguousarray(contexts, dtype=np.int64), device=self.device)

    def _check_targets(self, targets: np.ndarray, rows: int) -> torch.Tensor:
        targets = np.asarray(targets)
        if targets.shape != (rows,):
            raise NnlmError(f"targets must have shape [{rows}], got {list(targets.shape)}")
        if targets.size and (targets.min() < 0 or targets.max() >= len(self.vocab)):
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
        from nnlm.neural.direct_tables import scores

        log_p, log_z = scores(self.net, tables, table, ctx, targets)
        return log_p.numpy(), None if log_z is None else log_z.numpy()

    @contextmanager
    def long_pass(self, tokens: int) -> Iterator[None]:
        """A long normalized pass (fp32, or bf16: the tables are faster than its product and exact) builds
        the direct connections' per-position tables when they pay and fit (nnlm.neural.direct_tables),
        and frees them after it."""
        from nnlm.neural import direct_tables

        if self._tables is None and self.builds_tables(tokens):
            self._tables = direct_tables.position_tables(self.net, self.net.C)
        try:
            yield
        finally:
            self._tables = None

    def builds_tables(self, tokens: int) -> bool:
        """Whether a long normalized pass over `tokens` tokens builds the per-position tables (they pay and
        fit): what `long_pass` does, and what the reproduce planner times a pass by."""
        from nnlm.neural import direct_tables

        return (self.output_is_one_product and self.scoring.normalized
                and direct_tables.tables_pay(self.net, len(self.net.C), tokens, self.device))

    def _tables_for(self, table: torch.Tensor):
        """The per-position tables, if built from `table` and the weights as they are now."""
        from nnlm.neural.direct_tables import weights_version

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
        out = np.empty((len(ctx), len(self.vocab)), dtype=np.float64)
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
        k, v = self.context_size, len(self.vocab)
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

    # --- the stateful API: partial sums in the state, one U product a step (nnlm.neural.stepper) ---

    @property
    def steps_incrementally(self) -> bool:
        """Whether begin_state/advance keep partial sums (exact scoring, fp32 or float64 nets with W or H);
        unnormalized and bf16 scorings take the default path through log_prob, so their numbers agree."""
        return (self.scoring.exact and self._has_product and self.output_is_one_product
                and getattr(self.net, "P", None) is None)  # (the class pair's row: no per-position sums)

    def state_owner(self) -> str:
        """The default owner, and the weights' version: a state's sums are stale once the net is trained."""
        from nnlm.neural.direct_tables import weights_version

        return f"{super().state_owner()}/{hash(weights_version(self.net)):x}"

    def _current_stepper(self):
        from nnlm.neural.direct_tables import available_bytes, weights_version
        from nnlm.neural.stepper import CACHE_BYTES, CACHE_SHARE_OF_FREE, NeuralStepper

        version = weights_version(self.net)
        if self._stepper is None or self._stepper[0] != version:
            budget = self.step_cache_bytes
            if budget is None:
                free = available_bytes()
                budget = CACHE_BYTES if free is None else min(CACHE_BYTES, int(CACHE_SHARE_OF_FREE * free))
            self.net.eval()
            self._stepper = version, NeuralStepper(self.net, len(self.vocab), self.device, budget)
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

