"""The fused cells' weights as one chunk off the CPU (``baselines._cells.OneChunk``): cuDNN reads
a fused RNN's weights from one contiguous buffer in its layout and, given separate tensors,
compacts them at every call with a warning. On CPU: the property cuDNN checks (every tensor a
contiguous view of one storage, the first at its start, the rest packed after it in the order of
``nn.GRU``'s flat weights), after a move to a device other than the CPU (the meta device here),
and that a packed cell computes what an unpacked one does, gradients included. On CUDA: no
compaction warning, in a fresh process, against a control that does warn."""

import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

from baselines._cells import GRUWeights, LSTMWeights, is_one_chunk
from harness.components.registry import METHODS

V, D = 3, 5
CELLS = {"gru": (GRUWeights, nn.GRU), "lstm": (LSTMWeights, nn.LSTM)}


def make(kind: str) -> nn.Module:
    if kind == "rnn":
        return METHODS.get("rnn")(V, D)
    return CELLS[kind][0](V, D)


def reference_shapes(kind: str) -> list[torch.Size]:
    """The shapes of torch's own fused module's flat weights, in its (cuDNN's) order."""
    module = nn.RNN(V, D) if kind == "rnn" else CELLS[kind][1](V, D)
    return [w.shape for w in module._flat_weights]


def run(kind: str, m: nn.Module, x: torch.Tensor) -> torch.Tensor:
    h0 = x.new_zeros(x.shape[0], D)
    if kind == "rnn":
        return m(x).outputs
    if kind == "lstm":
        return m.fused(x, h0, h0)[0]
    return m.fused(x, h0)[0]


@pytest.mark.parametrize("kind", ["gru", "lstm", "rnn"])
def test_off_the_cpu_the_fused_weights_are_one_chunk_in_cudnn_order(kind):
    m = make(kind)
    assert [t.shape for t in m.chunk_tensors()] == reference_shapes(kind)
    meta = m.to("meta")
    tensors = meta.chunk_tensors()
    assert is_one_chunk(tensors)
    offsets = [t.storage_offset() for t in tensors]
    sizes = [t.numel() for t in tensors]
    assert offsets == [sum(sizes[:i]) for i in range(len(sizes))]
    assert all(isinstance(p, nn.Parameter) for p in meta.parameters())
    # made off the CPU, not moved: one chunk too
    with torch.device("meta"):
        assert is_one_chunk(make(kind).chunk_tensors())


@pytest.mark.parametrize("kind", ["gru", "lstm", "rnn"])
def test_on_the_cpu_nothing_is_repacked(kind):
    m = make(kind)
    assert not is_one_chunk(m.chunk_tensors())  # allocated as before: no CPU number moves
    m.double()
    assert not is_one_chunk(m.chunk_tensors())
    data = [t.data_ptr() for t in m.chunk_tensors()]
    m.to(torch.float64)  # no change: no copy
    assert [t.data_ptr() for t in m.chunk_tensors()] == data


@pytest.mark.parametrize("kind", ["gru", "lstm", "rnn"])
def test_a_packed_cell_computes_what_an_unpacked_one_does(kind):
    torch.manual_seed(0)
    a = make(kind).double()
    b = make(kind).double()
    b.load_state_dict(a.state_dict())
    b.pack_chunk(force=True)
    assert is_one_chunk(b.chunk_tensors()) and not is_one_chunk(a.chunk_tensors())
    x = torch.randn(2, 4, V, dtype=torch.float64)
    ya, yb = run(kind, a, x), run(kind, b, x)
    assert torch.equal(ya, yb)
    ya.square().sum().backward()
    yb.square().sum().backward()
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa.grad, pb.grad)
    # an optimizer's in-place update keeps the chunk
    torch.optim.SGD(b.parameters(), lr=0.1).step()
    assert is_one_chunk(b.chunk_tensors())


def test_is_one_chunk_rejects_apart_gaps_and_offsets():
    flat = torch.zeros(10)
    assert is_one_chunk([flat[:4].view(2, 2), flat[4:10]])
    assert not is_one_chunk([torch.zeros(4), torch.zeros(6)])  # two storages
    assert not is_one_chunk([flat[:4], flat[5:10]])  # a gap
    assert not is_one_chunk([flat[1:5], flat[5:10]])  # not at the storage's start
    assert not is_one_chunk([flat[4:10], flat[:4]])  # out of order
    assert not is_one_chunk([flat[:4].view(2, 2).t(), flat[4:10]])  # not contiguous
    assert not is_one_chunk([flat[:4], torch.zeros(12)[4:10]])  # other storage, same offsets


CHECK = """
import warnings, torch
from harness.components.registry import METHODS
warnings.simplefilter("always")
torch.manual_seed(0)
for name in ("gru", "lstm", "rnn"):
    m = METHODS.get(name)(3, 8).to("cuda")
    if UNPACK:
        for t in m.modules():
            for n in getattr(t, "_chunk", ()):
                with torch.no_grad():
                    getattr(t, n).set_(getattr(t, n).clone())
    x = torch.randn(4, 6, 3, device="cuda")
    m(x).outputs.sum().backward()
    m.double()(x.double()).outputs.sum().backward()
torch.cuda.synchronize()
print("done")
"""


def cuda_warnings(unpack: bool) -> str:
    code = textwrap.dedent(CHECK).replace("UNPACK", str(unpack))
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stderr[-3000:]
    return proc.stderr


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_no_cudnn_compaction_warning_on_cuda():
    assert "contiguous chunk" not in cuda_warnings(unpack=False)
    if torch.backends.cudnn.is_available():
        # the control: the same run with the tensors apart warns, so the check above can fail
        assert "contiguous chunk" in cuda_warnings(unpack=True)
