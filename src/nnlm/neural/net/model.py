"""The neural probabilistic language model of Bengio et al. (2003): the network, read top to bottom.

    x = [C(w_{t-n+1}), ..., C(w_{t-1})]          (n-1 word feature vectors, concatenated)
    y = b + W x + U tanh(d + H x)                 (unnormalized log-probabilities over V)
    P(w_t = i | context) = softmax(y)_i

Parameters and shapes (as in the paper): C |V|xm, H hx(n-1)m, d h, U |V|xh, W |V|x(n-1)m, b |V|.
h = 0 means no hidden layer (no H, d, U); direct=False means W = 0 (no W parameter).
The context columns are oldest-first, like every nnlm model's contexts, so x holds C(w_{t-n+1})
first; the order of the blocks of x does not change the model family.
The variants past the paper (more hidden layers, layer normalisation, residual layers, a wide-context
branch) are fields of ModelConfig (nnlm.neural.net.model_config); their defaults are the paper's net.
Its LanguageModel adapter (NumPy in, float64 out, the scoring chosen once) is NeuralLM, nnlm.neural.lm.neural_lm.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from nnlm.errors import NnlmError
from nnlm.neural.net.model_config import ModelConfig

__all__ = ["NPLM", "NPLMParameters"]


def seeded_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """nnlm.neural.net.dropout's seeded dropout, imported on its first use: its mask generator is compiled by
    numba, which a net trained without dropout (the paper's recipe) never needs to load."""
    from nnlm.neural.net.dropout import dropout

    return dropout(x, p)


class NPLMParameters(nn.Module):
    """The NPLM's parameters and its one formula, with the output layer (b, W, U) holding `rows`
    words: all of V in an NPLM, one rank's slice of V in nnlm.neural.parallel.vocab_parallel."""

    def __init__(self, config: ModelConfig, rows: int, dropout_x: float = 0.0, dropout_h: float = 0.0) -> None:
        super().__init__()
        self.config = config
        self.dropout_x = dropout_x  # modern recipe only: dropout on x and on the hidden layer
        self.dropout_h = dropout_h
        v, h, m, k = config.vocab_size, config.hidden, config.features, config.input_size
        self.C = nn.Parameter(torch.empty(v, m))
        self.b = nn.Parameter(torch.empty(rows))
        self.W = nn.Parameter(torch.empty(rows, k)) if config.direct else None
        self.Q = None  # tied with h != m: the projection of the last hidden layer onto the features
        if h > 0:
            self.H = nn.Parameter(torch.empty(h, k))
            self.d = nn.Parameter(torch.empty(h))
            if config.tied:  # U is C (`__getattr__`; not a parameter of its own: saved, decayed, updated as C)
                self.Q = nn.Parameter(torch.empty(m, h)) if h != m else None
            else:
                self.U = nn.Parameter(torch.empty(rows, h))
        else:
            self.H = self.d = self.U = None
        for layer in range(2, config.layers + 1):  # the deeper hidden layers: H2, d2, H3, d3, ...
            setattr(self, f"H{layer}", nn.Parameter(torch.empty(h, h)))
            setattr(self, f"d{layer}", nn.Parameter(torch.empty(h)))
        self.gains = [f"g{layer}" for layer in range(1, config.layers + 1)] if config.layer_norm else []
        for name in self.gains:
            setattr(self, name, nn.Parameter(torch.empty(h)))
        # the older words' weights: one sum (a vector, as models saved before `summaries` hold it), K of them,
        # or one sum weighted per feature
        shape = (config.distant,) if config.summaries == 1 else (config.summaries, config.distant)
        if config.sum_weights == "feature":
            shape = (config.distant, config.features)
        self.A = nn.Parameter(torch.empty(shape)) if config.distant else None
        pairs = config.class_context
        self.P = nn.Parameter(torch.empty(pairs * pairs, pairs)) if pairs else None
        if pairs:  # the class of every word, and last the class a word outside V (the paper's OOV vector) counts as
            self.register_buffer("context_class", torch.zeros(config.vocab_size + 1, dtype=torch.int64))
            self.register_load_state_dict_post_hook(_check_context_classes)

    def __getattr__(self, name: str):
        """nn.Module's (parameters, buffers, submodules), and U = C itself when tied (whatever replaced C)."""
        config = self.__dict__.get("config")
        if name == "U" and config is not None and config.tied:
            name = "C"
        return super().__getattr__(name)

    def deeper_layers(self) -> list[tuple[nn.Parameter, nn.Parameter]]:
        """(H_l, d_l) of the hidden layers after the first."""
        return [(getattr(self, f"H{k}"), getattr(self, f"d{k}")) for k in range(2, self.config.layers + 1)]

    def decayed_parameters(self) -> list[nn.Parameter]:
        """Weights and C: what the paper's weight decay applies to (not the biases b, d, nor gains and A)."""
        return ([p for p in (self.C, self.W, self.H, None if self.config.tied else self.U, self.Q, self.P)
                 if p is not None]
                + [H for H, _ in self.deeper_layers()])

    def bias_parameters(self) -> list[nn.Parameter]:
        return ([p for p in (self.b, self.d) if p is not None] + [d for _, d in self.deeper_layers()]
                + [getattr(self, g) for g in self.gains] + ([self.A] if self.A is not None else []))

    def features(self, contexts: torch.Tensor) -> torch.Tensor:
        """x: [N, n-1] word ids -> [N, input_size] feature vectors (see `embed`)."""
        return self.embed(contexts, self.C)

    def embed(self, contexts: torch.Tensor, table: torch.Tensor, sparse: bool = False) -> torch.Tensor:
        """x from the rows of `table` (C, or C with unknown words' features) that `contexts` [N, n-1] index;
        with class-pair features, the last two context words' pair's row of P appended. `sparse`: the
        table's gradient as the rows the contexts touched (a sparse tensor), not a dense |V| x m one."""
        if self.config.sum_weights == "feature" and not sparse:  # the older words summed as they are gathered
            x = self.context_from_rows(table, contexts)
        else:
            x = self.context_input(F.embedding(contexts, table, sparse=sparse))
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

    def context_from_rows(self, rows: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
        """x from the rows of a table (C, or the rows of C a batch gathered) and each context word's row in it,
        where [N, n-1]: `context_input` of the gathered vectors; a sum weighted per feature is taken as the
        rows are read (nnlm.neural.net.older_sum), without the [N, n-1-k, m] copies."""
        if self.config.sum_weights != "feature":
            return self.context_input(rows.index_select(0, where.flatten()).view(*where.shape, -1))
        from nnlm.neural.net.older_sum import older_sum

        distant = self.config.distant
        near = rows.index_select(0, where[:, distant:].flatten()).view(len(where), -1)
        return torch.cat([older_sum(rows, where[:, :distant], self.A), near], dim=1)

    def context_input(self, vectors: torch.Tensor) -> torch.Tensor:
        """x from the context words' feature vectors [N, n-1, m] (oldest first): their concatenation; with
        the wide-context branch, sum_j A_j C(older word j) (K such sums with `summaries`: A_kj; A_j * C(.)
        feature by feature with `sum_weights` "feature") followed by the `local` nearest, concatenated."""
        if self.A is None:
            return vectors.flatten(1)
        distant = self.config.distant
        if self.config.sum_weights == "feature":  # sum_j A_j * C(older word j), feature by feature (a product
            older = (vectors[:, :distant] * self.A).sum(1)  # and a sum: 2.6x faster than einsum's, backward too)
        elif self.A.dim() == 1:  # one sum: the contraction every model before `summaries` was trained with
            older = torch.einsum("j,njm->nm", self.A, vectors[:, :distant])
        else:
            older = torch.einsum("kj,njm->nkm", self.A, vectors[:, :distant]).flatten(1)
        return torch.cat([older, vectors[:, distant:].flatten(1)], dim=1)

    def hidden_output(self, x: torch.Tensor, dropout: bool = False) -> torch.Tensor:
        """The last hidden layer's output: a_1 = tanh(d + H x), then a_l = tanh(d_l + H_l a_{l-1})
        (+ a_{l-1} when residual); with layer norm, H_l a is normalised and scaled by g_l before d_l;
        tied with h != m, projected onto the features (Q a), the width of U = C.
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
        return a if self.Q is None else a @ self.Q.t()

    def hidden_from_preactivation(self, z: torch.Tensor) -> torch.Tensor:
        """`hidden_output` (eval mode) from the first layer's H x [N, h] already summed: what a stepped
        state keeps (nnlm.neural.lm.stepper), so a step does not multiply the whole context by H again."""
        a = torch.tanh((F.layer_norm(z, z.shape[1:]) * self.g1 if self.gains else z) + self.d)
        for index, (H, d) in enumerate(self.deeper_layers(), start=1):
            if self.gains:
                out = torch.tanh(F.layer_norm(a @ H.t(), H.shape[:1]) * getattr(self, self.gains[index]) + d)
            else:
                out = torch.tanh(torch.addmm(d, a, H.t()))
            a = a + out if self.config.residual else out
        return a if self.Q is None else a @ self.Q.t()

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
            for weight in (self.W, self.H, None if self.config.tied else self.U, self.Q):
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
            if self.A is not None and self.config.sum_weights == "feature":  # every feature: the average
                self.A.fill_(1.0 / self.config.distant)
            elif self.A is not None:  # sum k starts as the average of the nearest (n-1-local) / 2^k older words
                kernels = self.A.view(-1, self.config.distant)
                kernels.zero_()
                for k, kernel in enumerate(kernels):
                    reach = max(1, self.config.distant >> k)
                    kernel[-reach:] = 1.0 / reach
            if self.P is not None:
                self.P.uniform_(-0.1, 0.1)

    def forward(self, contexts: torch.Tensor) -> torch.Tensor:
        """Unnormalized log-probabilities y [N, |V|] of the next word for contexts [N, n-1]."""
        return self.logits_from_features(self.features(contexts))

    def output_operands(self, contexts: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The output layer's operands for contexts [N, n-1], for a loss that multiplies them as one
        product (`softmax_loss`); see `output_operands_from_features`."""
        return self.output_operands_from_features(self.features(contexts))

    def target_logits(self, x: torch.Tensor | None, targets: torch.Tensor, hidden: torch.Tensor | None = None
                      ) -> torch.Tensor:
        """y[i, targets[i]] [N] from the targets' rows of W, U, b only: no |V|-wide product (eval mode).
        `hidden`: the last hidden layer's output when the caller has it (a stepped state), else from x;
        x may be None when neither needs it (no W, `hidden` given)."""
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
