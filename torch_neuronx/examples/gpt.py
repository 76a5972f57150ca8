"""A small decoder-only transformer (GPT) in plain PyTorch, used by the benchmarks and tests.

Shapes: tokens (B, T) int64 -> logits (B, T, vocab) float32; loss = cross-entropy against the
next tokens. Architecture after Radford et al., "Language Models are Unsupervised Multitask
Learners" (2019): pre-LayerNorm blocks of causal self-attention and a GELU MLP.
"""
import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, d: int, heads: int, dropout: float = 0.0):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc = torch.nn.Linear(d, 4 * d)
        self.out = torch.nn.Linear(4 * d, d)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One pre-LayerNorm decoder block: (B, T, C) float activations in, (B, T, C) out
        (causal self-attention, then the MLP, each added to its input)."""
        # The rows of qkv are head-major (q, k, v of head 0, then of head 1, ...), so a
        # column-parallel split of qkv gives each rank whole heads (tensor parallel); sizes come
        # from the projection, since sequence parallelism shards x along T.
        h = self.qkv(self.ln1(x))
        B, T = h.shape[:2]
        hd = self.qkv.in_features // self.heads
        q, k, v = h.unflatten(2, (-1, 3 * hd)).transpose(1, 2).split(hd, dim=3)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        x = x + F.dropout(self.proj(y.transpose(1, 2).reshape(B, T, -1)), self.dropout, self.training)
        return x + F.dropout(self.out(F.gelu(self.fc(self.ln2(x)))), self.dropout, self.training)


class TinyGPT(torch.nn.Module):
    def __init__(self, vocab: int, d: int = 128, layers: int = 2, heads: int = 4, block: int = 64, dropout: float = 0.0):
        super().__init__()
        self.block = block
        self.tok = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Embedding(block, d)
        self.blocks = torch.nn.Sequential(*[Block(d, heads, dropout) for _ in range(layers)])
        self.ln = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """Next-character logits, or the mean cross-entropy loss against ``targets``.

        Args:
            idx: (B, T) int64 character indices, T <= ``block``.
            targets: optional (B, T) int64 indices of the next characters.

        Returns:
            (B, T, vocab) float logits when ``targets`` is None, else a 0-dim float tensor: the
            cross-entropy averaged over the B * T positions.
        """
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        logits = self.head(self.ln(self.blocks(x)))
        if targets is None:
            return logits
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
