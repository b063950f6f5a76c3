"""An LSTM language model trained with truncated backpropagation through time, written the way
PyTorch's own word_language_model example is: embedding -> dropout -> multi-layer nn.LSTM ->
dropout -> decoder (weights tied to the embedding), NLL of log-softmax, the hidden state detached
between BPTT windows, gradient clipping and a plain SGD update on ``p.data``.

The corpus is a toy language made here (no download): ``NEURON_SIM=1 python
examples/word_language_model.py`` trains on the emulated ``neuron`` device, ``--device cpu`` on the
CPU; with ``--dropout 0`` the losses agree.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.nn import functional as F


class RNNModel(nn.Module):
    """Container module with an encoder, a recurrent module, and a decoder."""

    def __init__(self, ntoken: int, ninp: int, nhid: int, nlayers: int, dropout: float = 0.5,
                 tie_weights: bool = False):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            if nhid != ninp:
                raise ValueError("When using the tied flag, nhid must be equal to emsize")
            self.decoder.weight = self.encoder.weight
        self.init_weights()
        self.nhid, self.nlayers = nhid, nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz: int):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                weight.new_zeros(self.nlayers, bsz, self.nhid))


def corpus(ntokens: int, length: int, seed: int) -> torch.Tensor:
    """A toy language: each token mostly follows from the one before (``(3 t + 1) mod n``)."""
    gen = torch.Generator().manual_seed(seed)
    data = torch.empty(length, dtype=torch.long)
    data[0] = 0
    noise = torch.rand(length, generator=gen) < 0.15
    random = torch.randint(0, ntokens, (length,), generator=gen)
    for i in range(1, length):
        data[i] = random[i] if noise[i] else (3 * data[i - 1] + 1) % ntokens
    return data


def batchify(data: torch.Tensor, bsz: int, device) -> torch.Tensor:
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous().to(device)


def get_batch(source: torch.Tensor, i: int, bptt: int):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].reshape(-1)


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="neuron")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--ntokens", type=int, default=50)
    parser.add_argument("--emsize", type=int, default=32)
    parser.add_argument("--nlayers", type=int, default=2)
    parser.add_argument("--bptt", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=5.0)
    parser.add_argument("--clip", type=float, default=0.25)
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=1111)
    parser.add_argument("--quiet", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> list[float]:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    train_data = batchify(corpus(args.ntokens, 4000, args.seed), args.batch_size, args.device)
    model = RNNModel(args.ntokens, args.emsize, args.emsize, args.nlayers, args.dropout, tie_weights=True)
    model = model.to(args.device)
    criterion = nn.NLLLoss()
    model.train()
    hidden = model.init_hidden(args.batch_size)
    losses = []
    for step, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
        if step == args.steps:
            break
        data, targets = get_batch(train_data, i, args.bptt)
        model.zero_grad()
        hidden = repackage_hidden(hidden)
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-args.lr)
        losses.append(loss.item())
        if not args.quiet:
            print(f"step {step:3d} loss {losses[-1]:.5f}")
    return losses


if __name__ == "__main__":
    main()
