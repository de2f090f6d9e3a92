"""Small MindSpore models and synthetic data for the demo runs (CPU-sized, seconds a run).

Imported only inside the demo's training processes: the demo's command line never imports
MindSpore (it is heavy and switches protobuf to its slow pure-Python backend).
"""

from __future__ import annotations

import mindspore as ms
import numpy as np
from mindspore import nn, ops

VOCAB = 32
SEQ_LEN = 16


class TinyTransformerLM(nn.Cell):
    """A two-layer pre-norm Transformer encoder predicting the next token."""

    def __init__(self, vocab: int = VOCAB, d_model: int = 32, heads: int = 2, layers: int = 2, seq_len: int = SEQ_LEN):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.position = ms.Parameter(ms.Tensor(np.random.default_rng(0).normal(0, 0.02, (1, seq_len, d_model)), ms.float32), name="position")
        self.encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=2 * d_model, dropout=0.0, batch_first=True, norm_first=True),
            num_layers=layers,
        )
        self.head = nn.Dense(d_model, vocab)

    def construct(self, tokens):
        hidden = self.embed(tokens) + self.position
        return self.head(self.encoder(hidden))


class TokenCrossEntropy(nn.Cell):
    """Mean cross entropy over every position of a (batch, seq, vocab) output."""

    def __init__(self):
        super().__init__()
        self.ce = nn.CrossEntropyLoss()

    def construct(self, logits, labels):
        return self.ce(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


class DeepSigmoidMLP(nn.Cell):
    """Many sigmoid layers with small init: the textbook case of vanishing gradients."""

    def __init__(self, in_dim: int = 16, width: int = 32, depth: int = 12, classes: int = 4):
        super().__init__()
        layers = []
        dim = in_dim
        for _ in range(depth):
            layers += [nn.Dense(dim, width, weight_init="normal"), nn.Sigmoid()]
            dim = width
        self.body = nn.SequentialCell(layers)
        self.head = nn.Dense(dim, classes)

    def construct(self, x):
        return self.head(self.body(x))


class MarkovTokens:
    """Token sequences from a fixed random Markov chain: learnable, with a known floor on the loss."""

    def __init__(self, seed: int = 0, batch: int = 16, vocab: int = VOCAB, seq_len: int = SEQ_LEN):
        rng = np.random.default_rng(seed)
        logits = rng.normal(0, 2.0, (vocab, vocab))
        self.transition = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        self.rng, self.batch, self.vocab, self.seq_len = rng, batch, vocab, seq_len

    def next_batch(self) -> tuple[np.ndarray, np.ndarray]:
        seq = np.empty((self.batch, self.seq_len + 1), dtype=np.int32)
        seq[:, 0] = self.rng.integers(0, self.vocab, self.batch)
        cumulative = self.transition.cumsum(axis=1)
        for t in range(1, self.seq_len + 1):
            u = self.rng.random(self.batch)[:, None]
            seq[:, t] = (u > cumulative[seq[:, t - 1]]).sum(axis=1).clip(0, self.vocab - 1)
        return seq[:, :-1], seq[:, 1:]

    def corrupted_batch(self) -> tuple[np.ndarray, np.ndarray]:
        """A batch whose labels are noise: what a broken shard or a tokenizer bug looks like."""
        tokens, _ = self.next_batch()
        return tokens, self.rng.integers(0, self.vocab, tokens.shape).astype(np.int32)


class GaussianClasses:
    """Four Gaussian blobs in 16 dimensions: an easy task that a healthy network learns fast."""

    def __init__(self, seed: int = 0, batch: int = 32, dim: int = 16, classes: int = 4):
        rng = np.random.default_rng(seed)
        self.centres = rng.normal(0, 1.5, (classes, dim)).astype(np.float32)
        self.rng, self.batch, self.classes = rng, batch, classes

    def next_batch(self) -> tuple[np.ndarray, np.ndarray]:
        labels = self.rng.integers(0, self.classes, self.batch).astype(np.int32)
        x = self.centres[labels] + self.rng.normal(0, 1.0, (self.batch, self.centres.shape[1])).astype(np.float32)
        return x, labels


__all__ = ["TinyTransformerLM", "TokenCrossEntropy", "DeepSigmoidMLP", "MarkovTokens", "GaussianClasses", "ops"]
