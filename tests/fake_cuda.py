"""A CUDA device on a CPU-only machine, for tests: tensors that say `cuda:0` and hold CPU numbers.

Inside `fake_cuda()`, `model.to("cuda")`, a factory called with `device="cuda"` and `.to("cuda")` /
`.cuda()` make `CudaTensor`s. Every operation on them runs on their CPU numbers after the check a
real GPU makes: a CUDA tensor meets a CPU tensor only as a 0-dim scalar, as an index, or in a copy
(`.to`, `copy_`, `x[i] = y`); otherwise `DeviceMismatch` ("Expected all tensors to be on the same
device"). As on a GPU, `.numpy()` of a CUDA tensor raises, `.item()`, `float()` and `.tolist()` read
its value, and a generator must live on the device of the tensors it draws (`torch.Generator(device=
"cuda")` works here too). So code that builds a tensor without the model's device fails in CI the way
it fails on a GPU, while analyses that read values (`.item()`, `.cpu().numpy()`) run to the end,
which fake tensors (shapes only) cannot do.

The check happens at each torch call our code makes (a `TorchFunctionMode`); inside a call torch runs
on plain CPU tensors. Operations reached below that level (module conversion, detach) are unwrapped
and checked at the dispatcher (`CudaTensor.__torch_dispatch__`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves, tree_map

CUDA = torch.device("cuda", 0)
CPU = torch.device("cpu")
aten = torch.ops.aten


class DeviceMismatch(RuntimeError):
    """What a GPU raises when one call mixes CUDA and CPU tensors (or a generator of the other device)."""


class CudaTensor(torch.Tensor):
    """Reports device cuda:0; its numbers live in `elem`, a plain CPU tensor."""

    elem: torch.Tensor

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> CudaTensor:
        if type(elem) is not torch.Tensor:
            raise TypeError(f"a CudaTensor wraps a plain CPU tensor, got {type(elem).__name__}")
        out = torch.Tensor._make_wrapper_subclass(
            cls, elem.size(), strides=elem.stride(), storage_offset=elem.storage_offset(), dtype=elem.dtype,
            layout=elem.layout, device=CUDA, requires_grad=elem.requires_grad)
        out.elem = elem
        return out

    __torch_function__ = torch._C._disabled_torch_function_impl

    def __repr__(self) -> str:  # type: ignore[override]
        return f"CudaTensor({self.elem!r})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is aten._has_compatible_shallow_copy_type.default:
            return type(args[0]) is type(args[1])
        plain: list[torch.Tensor] = []
        low_args, low_kwargs = tree_map(lambda x: _lower(x, plain), (args, kwargs))
        if func not in _DISPATCH_CROSS_OK:
            _check(func, plain)
        target = low_kwargs.get("device")
        if target is not None:
            low_kwargs = {**low_kwargs, "device": CPU}
        out = func(*low_args, **low_kwargs)
        if target is not None and not _is_cuda(target):
            return out
        if args and isinstance(args[0], CudaTensor) and out is low_args[0]:
            return args[0]  # an in-place op returns its own argument
        return _wrap(out)


_DISPATCH_CROSS_OK = {aten.copy_.default, aten._to_copy.default, aten.index.Tensor, aten.index_put_.default,
                      aten.index_put.default, aten._index_put_impl_.default}
# Python-level calls where a GPU accepts CPU tensors beside CUDA ones (indices, values copied in).
_CROSS_OK = {torch.Tensor.__getitem__, torch.Tensor.__setitem__, torch.Tensor.copy_, torch.Tensor.index_put_,
             torch.Tensor.index_put}
# Bookkeeping calls that compare or relabel tensors without computing on them: run as they are.
_AS_IS = {torch._has_compatible_shallow_copy_type, torch.Tensor.requires_grad_, torch.Tensor.__hash__,
          torch.Tensor.__reduce_ex__, torch.Tensor.__deepcopy__}
_HOST_READS = {torch.Tensor.__float__, torch.Tensor.__int__, torch.Tensor.__bool__, torch.Tensor.__index__,
               torch.Tensor.__complex__, torch.Tensor.tolist, torch.Tensor.item}
_NUMPY = {torch.Tensor.numpy, torch.Tensor.__array__}
_FACTORIES = {torch.tensor, torch.as_tensor, torch.arange, torch.zeros, torch.ones, torch.full, torch.empty,
              torch.randn, torch.rand, torch.randint, torch.randperm, torch.linspace, torch.logspace, torch.eye,
              torch.empty_strided, torch.scalar_tensor, torch.tril_indices, torch.triu_indices}


def _is_cuda(device: Any) -> bool:
    return device is not None and torch.device(device).type == "cuda"


def _lower(x: Any, plain: list[torch.Tensor]) -> Any:
    if isinstance(x, CudaTensor):
        return x.elem
    if isinstance(x, torch.Tensor):
        plain.append(x)
    return x


def _wrap(out: Any) -> Any:
    if type(out) is torch.Tensor:
        return CudaTensor(out)
    if isinstance(out, tuple) and hasattr(out, "n_fields"):  # torch.return_types (topk, max, ...)
        return type(out)([_wrap(v) for v in out])
    if isinstance(out, (list, tuple)):
        return type(out)(_wrap(v) for v in out)
    return out


def _check(func: Any, plain: list[torch.Tensor]) -> None:
    bad = [tuple(p.shape) for p in plain if p.dim() > 0]
    if bad:
        name = getattr(func, "__name__", str(func))
        raise DeviceMismatch(f"Expected all tensors to be on the same device, but found at least two devices, "
                             f"cuda:0 and cpu! ({name}: CPU tensors of shapes {bad} beside CUDA ones)")


def _generators(args: tuple, kwargs: dict) -> list[torch.Generator]:
    return [g for g in (*args, *kwargs.values()) if isinstance(g, torch.Generator)]


def _check_generator(func: Any, on_cuda: bool, args: tuple, kwargs: dict) -> None:
    for g in _generators(args, kwargs):
        if _is_cuda(g.device) != on_cuda:
            raise DeviceMismatch(f"Expected a '{'cuda' if on_cuda else 'cpu'}' device type for generator but found "
                                 f"'{g.device.type}' ({getattr(func, '__name__', func)})")


class _CudaGenerator(torch.Generator):
    """`torch.Generator(device="cuda")` on a CPU build: draws on the CPU, says it is on cuda:0."""

    def __new__(cls, device: Any = "cpu") -> _CudaGenerator:
        out = super().__new__(cls, device="cpu")
        out._fake = CUDA if _is_cuda(device) else CPU
        return out

    def __init__(self, device: Any = "cpu") -> None:  # the C type takes its device in __new__
        pass

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return self._fake


def _move(func: Any, args: tuple, kwargs: dict) -> Any:
    """`.to(...)`, `.cuda()`, `.cpu()`: the one place a tensor changes device."""
    src = args[0]
    if func is torch.Tensor.cuda:
        device, dtype = CUDA, None
    elif func is torch.Tensor.cpu:
        device, dtype = CPU, None
    else:
        device, dtype, _, _ = torch._C._nn._parse_to(*args[1:], **kwargs)
    on_cuda = isinstance(src, CudaTensor)
    to_cuda = on_cuda if device is None else _is_cuda(device)
    data = src.elem if on_cuda else src.detach() if isinstance(src, torch.nn.Parameter) else src
    if (on_cuda == to_cuda) and (dtype is None or dtype == src.dtype):
        return src  # nothing to do: `.to` returns the tensor itself
    moved = data.to(dtype=dtype or data.dtype, copy=True)
    return CudaTensor(moved) if to_cuda else moved


class _FakeCudaMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _AS_IS or getattr(func, "__name__", "") == "__get__":  # a property: the tensor's own
            return func(*args, **kwargs)
        first = args[0] if args else None
        if func in (torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.cpu):
            return _move(func, args, kwargs)
        if isinstance(first, CudaTensor):
            if func in _HOST_READS:
                return func(first.elem, *args[1:], **kwargs)
            if func in _NUMPY:
                raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the "
                                "tensor to host memory first.")
        if func in _FACTORIES:
            on_cuda = _is_cuda(kwargs.get("device"))
            if kwargs.get("pin_memory") and not on_cuda:  # page-locked host memory: plain host memory here
                kwargs = {k: v for k, v in kwargs.items() if k != "pin_memory"}
            _check_generator(func, on_cuda, args, kwargs)
            out = func(*args, **{**kwargs, "device": CPU} if on_cuda else kwargs)
            return CudaTensor(out) if on_cuda and type(out) is torch.Tensor else out
        plain: list[torch.Tensor] = []
        low_args, low_kwargs = tree_map(lambda x: _lower(x, plain), (args, kwargs))
        any_cuda = any(isinstance(x, CudaTensor) for x in tree_leaves((args, kwargs)))
        if not any_cuda:
            _check_generator(func, _is_cuda(kwargs.get("device")), args, kwargs)
            return func(*args, **kwargs)
        if func not in _CROSS_OK:
            _check(func, plain)
        _check_generator(func, True, args, kwargs)
        target = low_kwargs.get("device")
        if target is not None:
            low_kwargs = {**low_kwargs, "device": CPU}
        out = func(*low_args, **low_kwargs)
        if target is not None and not _is_cuda(target):
            return out
        if isinstance(first, CudaTensor) and out is low_args[0]:
            return first  # in-place (add_, masked_fill_, __setitem__'s None aside)
        return _wrap(out)


class FakeDevice:
    """What the code under test did with the device: how often it waited for it (the device, or an event)."""

    def __init__(self) -> None:
        self.synchronized = 0
        self.events_waited = 0

    def synchronize(self, device: Any = None) -> None:
        self.synchronized += 1

    def event(self) -> _FakeEvent:
        return _FakeEvent(self)


class _FakeEvent:
    """`torch.cuda.Event`: the work queued before `record` is done when it is recorded (it ran on the CPU)."""

    def __init__(self, device: FakeDevice) -> None:
        self.device, self.recorded = device, False

    def record(self, stream: Any = None) -> None:
        self.recorded = True

    def synchronize(self) -> None:
        assert self.recorded, "an event waited for before it was recorded"
        self.device.events_waited += 1


@contextlib.contextmanager
def fake_cuda() -> Iterator[FakeDevice]:
    """Pretend this CPU build has one CUDA device (see the module docstring)."""
    fake = FakeDevice()
    saved = (torch.cuda._lazy_init, torch.cuda.synchronize, torch.Generator, torch.cuda.Event,
             torch.__future__.get_swap_module_params_on_conversion())
    torch.cuda._lazy_init = lambda: None  # the tensors never reach a CUDA kernel
    torch.cuda.synchronize = fake.synchronize
    torch.cuda.Event = fake.event
    torch.Generator = _CudaGenerator
    # nn.Module.to swaps each parameter for its CudaTensor (a plain `.data =` cannot hold a subclass).
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        with _FakeCudaMode():
            yield fake
    finally:
        torch.cuda._lazy_init, torch.cuda.synchronize, torch.Generator, torch.cuda.Event = saved[:4]
        torch.__future__.set_swap_module_params_on_conversion(saved[4])
