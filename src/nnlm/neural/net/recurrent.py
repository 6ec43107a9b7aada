"""The paper's "recurrent network for longer context" (its section 6): the NPLM's word features C feeding a
recurrent state instead of a fixed window.

    x_t = C(w_{t-1})                                   (the feature vector of the word just read)
    s_t = cell(s_{t-1}, x_t)                           (an LSTM or a tanh RNN of `layers` layers of h units)
    y_t = b + U a_t (+ W x_t)                          (a_t: the top layer's output; U = C when tied)
    P(w_t = i | w_1 .. w_{t-1}) = softmax(y_t)_i

The cell is torch's own (nn.LSTM / nn.RNN): nothing of it is written here. What is nnlm's is where a text
starts: the state before reading the start-of-text token (`data.vocab.start_token`, the pad every nnlm model
puts before a text) is the zero state, whatever came before. The state is then a function of the current text
alone, so a split, a file or a chunk of a stream is scored exactly by reading from its text's start, and the
independent texts of a stream are read side by side (`read`: one packed batch, PackedSequence).
Training (nnlm.neural.run.recurrent_trainer) resets at the same tokens, so it learns what scoring does.
The LanguageModel adapter is nnlm.neural.lm.recurrent_lm.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence

from nnlm.errors import NnlmError
from nnlm.neural.net.model_config import ModelConfig

__all__ = ["RecurrentNPLM"]


class RecurrentNPLM(nn.Module):
    """C, b, U (unless tied), W (direct connections from x_t) and the cell; a state is one tensor
    [B, parts, layers, h] (parts: h and c for the LSTM, h for the RNN), rows first so that LMState.take
    and checkpoints handle it as any tensor."""

    def __init__(self, config: ModelConfig, dropout_x: float = 0.0, dropout_h: float = 0.0) -> None:
        super().__init__()
        if config.recurrent == "none":
            raise NnlmError("RecurrentNPLM needs a config with recurrent = lstm or rnn")
        self.config, self.dropout_x, self.dropout_h = config, dropout_x, dropout_h
        v, h, m = config.vocab_size, config.hidden, config.features
        self.C = nn.Parameter(torch.empty(v, m))
        self.b = nn.Parameter(torch.empty(v))
        self.W = nn.Parameter(torch.empty(v, m)) if config.direct else None
        self.U = None if config.tied else nn.Parameter(torch.empty(v, h))
        between = dropout_h if config.layers > 1 else 0.0  # (torch warns of dropout after a single layer)
        if config.recurrent == "lstm":
            self.cell: nn.RNNBase = nn.LSTM(m, h, config.layers, dropout=between, batch_first=True)
        else:
            self.cell = nn.RNN(m, h, config.layers, nonlinearity="tanh", dropout=between, batch_first=True)
        self.parts = 2 if config.recurrent == "lstm" else 1
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Small uniform C (the NPLM's), U(-1/sqrt(fan_in), +) for U and W, zero b; the cell's own default."""
        with torch.no_grad():
            self.C.uniform_(-0.1, 0.1)
            self.b.zero_()
            for weight in (self.W, self.U):
                if weight is not None:
                    bound = 1.0 / math.sqrt(weight.shape[1])
                    weight.uniform_(-bound, bound)
            self.cell.reset_parameters()

    def decayed_parameters(self) -> list[nn.Parameter]:
        """C, U, W and the cell's weight matrices: what weight decay applies to (not the biases)."""
        cell = [p for name, p in self.cell.named_parameters() if name.startswith("weight")]
        return [p for p in (self.C, self.W, self.U) if p is not None] + cell

    def bias_parameters(self) -> list[nn.Parameter]:
        return [self.b] + [p for name, p in self.cell.named_parameters() if name.startswith("bias")]

    def output_weights(self) -> list[torch.Tensor]:
        """The ws of y = b + sum_j zs[j] ws[j]^T, in `output_operands`' order: W (direct), then U (or C)."""
        return ([self.W] if self.W is not None else []) + [self.C if self.U is None else self.U]

    def output_operands(self, a: torch.Tensor, x: torch.Tensor) -> list[torch.Tensor]:
        """The zs that go with `output_weights`: x_t (direct), then a_t (dropped out when training)."""
        if self.training and self.dropout_h > 0:
            a = F.dropout(a, self.dropout_h, training=True)
        return ([x] if self.W is not None else []) + [a]

    def zero_state(self, rows: int) -> torch.Tensor:
        c = self.config
        return self.C.new_zeros((rows, self.parts, c.layers, c.hidden))

    def _cell_state(self, state: torch.Tensor):
        s = state.permute(1, 2, 0, 3).contiguous()  # [parts, layers, B, h]
        return (s[0], s[1]) if self.parts == 2 else s[0]

    def _rows_state(self, cell_state) -> torch.Tensor:
        s = torch.stack(cell_state) if self.parts == 2 else cell_state[None]
        return s.permute(2, 0, 1, 3)

    def read(self, inputs: torch.Tensor, resets: np.ndarray, state: torch.Tensor | None = None
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Read inputs [B, T] (ids) from `state` [B, ...] (None: zero), the state zeroed before every input
        where `resets` [B, T] is True: (a [B, T, h] the top layer's outputs, x [B, T, m] the inputs' features,
        the state after the last input). Each row is cut at its resets into texts, and all texts are read
        side by side as one packed batch (a row's first text from its carried state, the others from zero)."""
        rows, steps = inputs.shape
        x = F.embedding(inputs, self.C)
        if self.training and self.dropout_x > 0:
            x = F.dropout(x, self.dropout_x, training=True)
        state = self.zero_state(rows) if state is None else state
        cuts = np.asarray(resets, dtype=bool).copy()
        state = torch.where(torch.as_tensor(cuts[:, 0], device=x.device)[:, None, None, None],
                            torch.zeros_like(state), state)
        if not cuts[:, 1:].any():  # one text a row: the cell over the window as it is
            a, last = self.cell(x, self._cell_state(state))
            return a, x, self._rows_state(last)
        cuts[:, 0] = True
        starts = np.flatnonzero(cuts.reshape(-1))  # each text's first position, row-major
        lengths = np.diff(np.append(starts, rows * steps))
        row_of = starts // steps
        carried = starts % steps == 0  # (its state is the row's: zeroed above where it resets)
        init = self.zero_state(len(starts))
        init[torch.as_tensor(np.flatnonzero(carried))] = state[torch.as_tensor(row_of[carried])]
        texts = pad_sequence(torch.split(x.reshape(rows * steps, -1), lengths.tolist()), batch_first=True)
        packed = pack_padded_sequence(texts, torch.as_tensor(lengths), batch_first=True, enforce_sorted=False)
        out, last = self.cell(packed, self._cell_state(init))
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=int(lengths.max()))
        mask = torch.arange(out.shape[1])[None, :] < torch.as_tensor(lengths)[:, None]
        a = out[mask.to(out.device)].view(rows, steps, -1)  # (texts in row-major order: the positions' order)
        final = np.append(np.flatnonzero(np.diff(row_of)), len(starts) - 1)  # each row's last text
        return a, x, self._rows_state(last)[torch.as_tensor(final)]

    def logits(self, a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """y [N, |V|] from a [N, h] and x [N, m] (eval mode)."""
        y = self.b.expand(len(a), -1)
        for z, w in zip(self.output_operands(a, x), self.output_weights(), strict=True):
            y = torch.addmm(y, z, w.t())
        return y
