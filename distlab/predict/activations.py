"""Activation memory, predicted: the bytes a rank's forward pass keeps for its backward pass.

Introduced in lesson 08 (the MLP's, next to ZeRO's training state) and lesson 12 (the transformer's,
under tensor, sequence and context parallelism).  Between forward and backward every operation keeps
what its gradient will need (a matrix product its inputs, softmax its output, ...): the
*activations*.  ZeRO does not shard them; for long lines they, not the parameters, fill a rank's
memory, and the scores of attention grow with the square of the line.  What PyTorch really keeps is
counted by ``train.memory_held`` (the MLP) and ``sequence.memory.SavedTensors`` (the transformer),
and the tests hold these formulas to those counts.  A pipeline stage keeps its share of these for
each micro-batch in flight (``bubbles.held_micro_batches``).
"""
from __future__ import annotations


def mlp_activation_bytes(batch: int, width: int, depth: int = 2, *, inputs: int = 64,
                         classes: int = 10, itemsize: int = 4) -> int:
    """Lesson 08: what the course's MLP keeps for its backward pass, per mini-batch.

    Each ``Linear`` keeps its input, each ``ReLU`` its output, which is the next ``Linear``'s
    input (one tensor, counted once), and the loss keeps the log-probabilities and the labels
    (64-bit integers): per sample, the input, ``depth`` hidden layers, the classes and a label.
    """
    return batch * ((inputs + depth * width + classes) * itemsize + 8)


def transformer_activation_bytes(cfg, batch: int, tokens: int, *, tensor: int = 1, sequence_parallel: bool = False,
                               context: int = 1, attention: str = "ring", itemsize: int = 4,
                               regather: bool = False, recompute: str = "none", layers: int | None = None,
                               embedding: bool = True, read_out: bool = True) -> dict[str, int]:
    """Lesson 12: the bytes of activations one rank keeps for backward in one step, by part, from the
    model's shapes alone (``cfg`` a ``flops.TransformerShape`` or lesson 12's ``TransformerConfig``;
    ``batch`` lines of ``tokens`` tokens).

    Korthikanti et al. 2022 (§4.1, their equation 1) count a transformer layer's activations as
    ``sbh(34 + 5as/h)`` bytes: ``s`` tokens, ``b`` lines, ``h`` the model width, ``a`` heads, 16-bit
    numbers and dropout masks.  This model has no dropout and 32-bit numbers, so counted in numbers,
    each block keeps (``n = b s h``, MLP width ``4h``):

    * ``n`` the first LayerNorm's input and ``2bs`` its mean and spread; the same for the second;
    * ``n`` the input of Q, K and V (one tensor, kept once), ``3n`` Q, K and V themselves,
      ``a b s^2`` the softmax's probabilities (and, causal, the ``s^2``-byte mask), ``n`` the input of
      the output projection;
    * ``n`` the MLP's input, ``4n`` GELU's input and ``4n`` its output;

    that is ``16n + a b s^2``: their 34 = 2 x 16 + 2 bytes of dropout masks, with the same ``a s^2``
    term (their 5 = 2 + 1 + 2 bytes for probabilities, dropout mask, dropped probabilities).
    Splitting divides what each rank keeps:

    * **tensor parallelism** over ``t`` ranks: what lies between f and g (Q, K, V, the probabilities,
      the output projection's input, the MLP's hidden units) by ``t``; the LayerNorms' inputs and the
      inputs of the split regions stay whole (their 10 sbh of ``10 + 24/t``);
    * **+ sequence parallelism**: the LayerNorms' inputs by ``t`` too.  The inputs of Q/K/V and of
      the MLP are the all-gathered line here, kept whole: Megatron keeps them in pieces and gathers
      them again in the backward, which this code does not (``regather=True`` predicts Megatron's way);
    * **context parallelism** over ``c`` ranks: every token-wise tensor by ``c``.  Attention keeps,
      gathered, the whole line's K and V and ``a b (s/c) s`` probabilities; on the ring, no
      probabilities at all (the backward recomputes them from Q, K and each query's log-sum-exp),
      only Q, K and V of its tokens and one log-sum-exp per query.
    Outside the blocks: the tokens' pixels, the last LayerNorm, the read-out's input and the losses.
    The ``total`` is checked against ``sequence.memory.SavedTensors`` (what PyTorch really keeps) in
    tests/test_sequence.py.

    Lesson 14, **recomputation** (``train.recompute``; Korthikanti et al. 2022, section 5):

    * ``recompute="full"``: a block keeps its input only, ``b s h`` numbers (their table 2: ``2sbh`` bytes
      in 16-bit numbers), of the piece of the line this rank holds there: ``1/t`` of it with sequence
      parallelism, ``1/c`` with context parallelism; everything outside the blocks stays;
    * ``recompute="selective"``: the attention probabilities and the causal masks go (and, with K and V
      all-gathered, the gathered K and V: the recomputed region's inputs are this rank's Q, K and V, kept
      anyway).  Ring attention keeps no probabilities to drop, and is refused.

    A pipeline stage's share (``layers`` blocks, with or without the ``embedding`` and the ``read_out``)
    is what it keeps per micro-batch (``batch``: the micro-batch's lines); it holds that for each
    micro-batch in flight (``bubbles.held_micro_batches``: GPipe's re-materialisation keeps a stage's
    block inputs for every micro-batch, Huang et al. 2019, section 2.3)."""
    if recompute not in ("none", "full", "selective"):
        raise ValueError(f"recompute must be 'none', 'full' or 'selective', got {recompute!r}")
    if recompute == "selective" and context > 1 and attention == "ring":
        raise ValueError("selective recomputation with ring attention is refused (train.recompute.check_layout): "
                         "the ring keeps no probabilities to drop")
    b, s, h, a = batch, tokens, cfg.d_model, cfg.heads
    blocks = cfg.layers if layers is None else layers
    m = cfg.mlp_ratio * h
    t = tensor
    sl = s // context                                  # the tokens this rank holds between attentions
    shard = t if sequence_parallel else 1              # sequence parallelism: the line in t pieces there
    n_local = b * sl * h
    parts = {}
    layer = {
        "layernorm inputs and statistics": 2 * (b * sl * h + 2 * b * sl) // shard,
        "inputs of the split regions": 2 * ((b * s * h // t if regather else b * s * h) if sequence_parallel
                                            else n_local),
        "MLP hidden units": 2 * b * sl * m // t,
        "output projection input": n_local // t,
    }
    if context == 1:
        layer["Q, K, V"] = 3 * n_local // t
        layer["attention probabilities"] = a * b * s * s // t
    elif attention == "all_gather":
        layer["Q, K, V"] = n_local // t + 2 * b * s * h // t         # its Q; everyone's K and V
        layer["attention probabilities"] = a * b * sl * s // t
    else:
        layer["Q, K, V"] = 3 * n_local // t
        # its output is the output projection's input itself (laid out as Q is, the heads side by side
        # is a view of it), so the ring adds only each query's log-sum-exp
        layer["ring log-sum-exp"] = a * b * sl // t
    masks = (s * s if context == 1 else sl * s if attention == "all_gather" else 0) if cfg.causal else 0
    if recompute == "selective":          # the region's inputs (this rank's Q, K, V) stay; what it made goes
        layer.pop("attention probabilities")
        layer["Q, K, V"] = 3 * n_local // t
        masks = 0
    elif recompute == "full":             # a block keeps the piece of the line it was given, nothing more
        layer, masks = {"block inputs": b * sl * h // shard}, 0
    for name, numbers in layer.items():
        parts[name] = blocks * numbers * itemsize
    if masks:
        parts["causal masks"] = blocks * masks                           # one byte per query-key pair
    k = tokens // 16
    # the read-out's input: each digit's mean is a tensor of its own; a causal reader's last tokens are a
    # view of the whole (gathered) line, which the digit head's product then keeps alive
    read_out_input = b * s * h if cfg.causal else b * k * h
    outside = 0
    if embedding:                         # the tokens' pixels, and their positions (64-bit)
        outside += b * sl * 4 // shard * itemsize + 8 * (sl // shard)
    if read_out:                          # the last LayerNorm, the read-out's input, the logits and labels
        outside += (((b * sl * h + 2 * b * sl) // shard + read_out_input + b * k * 10 + b * 2) * itemsize
                    + 8 * b * (k + 1))
    parts["outside the blocks"] = outside
    parts["total"] = sum(parts.values())
    return parts


def full_recompute_peak_bytes(cfg, batch: int, tokens: int, **layout) -> int:
    """Lesson 14: the most activation bytes a rank holds during the backward pass with full recomputation:
    what it keeps (``transformer_activation_bytes(..., recompute="full")``) plus one block's activations,
    rematerialised for that block's backward and freed before the next block's (Chen et al. 2016, "Training
    deep nets with sublinear memory cost": the peak is the kept checkpoints plus one segment's activations).
    ``layout``: the keywords of ``transformer_activation_bytes`` (``tensor``, ``sequence_parallel``,
    ``context``, ``attention``, ``itemsize``); the pipeline's keywords do not apply.  A model, not a count:
    it leaves out the gradients of the activations in flight and the scores being built
    (``score_block_bytes``), and assumes what a block kept is freed as soon as its backward ends."""
    kept = transformer_activation_bytes(cfg, batch, tokens, recompute="full", **layout)["total"]
    whole = transformer_activation_bytes(cfg, batch, tokens, **layout)
    one_block = (whole["total"] - whole["outside the blocks"]) // cfg.layers
    return kept + one_block


def score_block_bytes(cfg, batch: int, tokens: int, *, tensor: int = 1, sequence_parallel: bool = False,
                      context: int = 1, attention: str = "ring", split: str = "contiguous", itemsize: int = 4) -> int:
    """Lesson 12: the largest tensor of attention scores a rank builds at once: not kept for backward
    (``transformer_activation_bytes`` leaves it out), but alive while it is built, so a rank's peak is
    at least what it keeps plus this.  One process: ``a b s^2`` (its probabilities, as large, are kept
    beside it); gathered K and V: ``a b (s/c) s``; the ring: one block, a chunk of queries on a chunk
    of keys, ``a b (s/c)^2`` (zig-zag chunks are half as long: a quarter of that), built anew each hop.
    Tensor parallelism divides the heads; sequence parallelism changes nothing here (attention sees the
    gathered line)."""
    a, b, s = cfg.heads // tensor, batch, tokens
    if context == 1:
        return a * b * s * s * itemsize
    if attention == "all_gather":
        return a * b * (s // context) * s * itemsize
    chunk = s // (2 * context if split == "zigzag" else context)
    return a * b * chunk * chunk * itemsize


def korthikanti_layer_bytes(tokens: int, batch: int, d_model: int, heads: int, *, tensor: int = 1,
                            sequence_parallel: bool = False, recompute: str = "none") -> float:
    """Lesson 12: Korthikanti et al. 2022's activation bytes of one transformer layer (16-bit numbers,
    dropout masks; their section 4, equations 1, 2 and 4): ``sbh(34 + 5as/h)`` on one rank,
    ``sbh(10 + 24/t + 5as/(ht))`` with tensor parallelism over ``t``, ``sbh/t (34 + 5as/h)`` with
    sequence parallelism as well (the region inputs kept in pieces and gathered again in backward).
    ``transformer_activation_bytes`` adapts it to this course's model (32-bit, no dropout).
    ``recompute`` (lesson 14, their section 5 and table 2): ``"selective"`` drops the ``5as/h`` term (the
    attention core's scores, softmax and dropout), ``"full"`` keeps each layer's input only, ``2sbh``
    (``/t`` with sequence parallelism, whose layer input is in pieces)."""
    s, b, h, a, t = tokens, batch, d_model, heads, tensor
    if recompute not in ("none", "selective", "full"):
        raise ValueError(f"recompute must be 'none', 'selective' or 'full', got {recompute!r}")
    scores = 0 if recompute == "selective" else 5 * a * s / h
    if recompute == "full":
        return 2 * s * b * h / (t if sequence_parallel else 1)
    if sequence_parallel:
        return s * b * h / t * (34 + scores)
    return s * b * h * (10 + 24 / t + scores / t)


def mlp_saved_bytes(batch: int, width: int, depth: int = 2, *, policy: str = "fp32", inputs: int = 64,
                    classes: int = 10) -> dict[str, int]:
    """Lesson 14: ``mlp_activation_bytes`` under a precision policy of ``precision.mixed``, in two parts.

    Under autocast (bf16, fp16, and bf16 master weights, whose forward also runs under it) each ``Linear``
    keeps its input cast to 16 bits (2 bytes), the ReLUs' outputs are 16-bit, and the loss is computed in
    fp32 (autocast widens softmax's input): per sample ``2 inputs + 2 depth width + 4 classes + 8``.
    ``"weight copies"``: autocast casts each fp32 weight to 16 bits for its product and keeps the copy for
    the input's gradient; the first layer's input needs none, so the others' weights, 2 bytes each.
    bf16 master weights are 16-bit already: no copy.  fp32: ``mlp_activation_bytes`` and no copies."""
    if policy == "fp32":
        return {"activations": mlp_activation_bytes(batch, width, depth, inputs=inputs, classes=classes),
                "weight copies": 0}
    if policy not in ("bf16", "fp16", "fp16_unscaled", "bf16_master"):
        raise ValueError(f"policy must be fp32, bf16, fp16, fp16_unscaled or bf16_master, got {policy!r}")
    activations = batch * (2 * inputs + 2 * depth * width + 4 * classes + 8)
    copies = 0 if policy == "bf16_master" else 2 * (width * width * (depth - 1) + width * classes)
    return {"activations": activations, "weight copies": copies}

