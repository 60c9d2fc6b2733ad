"""How values reach the extension: buffers, addresses and tensors.

The extension takes objects with the buffer protocol (held for the call, no
copy) and int addresses inside registered memory. PyTorch tensors have no
buffer protocol, so a CPU tensor is viewed as its bytes through NumPy (a
view of the same memory, whatever the dtype: bfloat16 included), and a CUDA
tensor goes by address through the library's CUDA path. torch is never
imported here: a tensor is recognised by its type's module.
"""

def _is_tensor(obj):
    t = type(obj)
    return t.__module__.startswith("torch") and hasattr(obj, "data_ptr") and hasattr(obj, "is_cuda")


def _check_inside_storage(t, addr, n):
    """[addr, addr+n) must lie inside the tensor's storage. What torch says a
    tensor's bytes are is not always so: a packed dtype (quint4x2: two
    values a byte) counts numel() values of element_size() 1 over a storage
    half that size, and its uint8 view claims the whole count -- a get
    into it wrote past the end of the allocation. The storage's own span is
    the bound. Objects without one (stand-ins with the tensor interface)
    are taken at their word."""
    get = getattr(t, "untyped_storage", None) or getattr(t, "storage", None)
    if get is None:
        return
    try:
        st = get()
        lo, size = st.data_ptr(), st.nbytes()
    except (AttributeError, RuntimeError, TypeError):
        return
    if addr < lo or addr + n > lo + size:
        raise ValueError(f"this tensor's {n} bytes as torch counts them (dtype {t.dtype}) are not inside its "
                         f"storage of {size} bytes: a packed dtype cannot be stored or loaded as it is")


def tensor_bytes(t, writable):
    """A CPU tensor as a uint8 NumPy view of its memory."""
    if not t.is_contiguous():
        raise ValueError("a tensor must be contiguous to be stored or loaded without a copy "
                         "(call .contiguous() first)")
    flat = t.detach().reshape(-1)
    if flat.numel() == 0:
        raise ValueError("an empty tensor holds no bytes")
    import torch  # noqa: PLC0415 -- only reached with a tensor in hand
    arr = flat.view(torch.uint8).numpy()
    _check_inside_storage(t, arr.ctypes.data, arr.nbytes)
    return arr


class Pieces:
    """The pieces of one call: what to hand the extension, and the CUDA
    ranges that must be registered while it runs."""

    __slots__ = ("bufs", "sizes", "device", "keep")

    def __init__(self):
        self.bufs = []
        self.sizes = []
        self.device = []   # (addr, size) of CUDA tensors
        self.keep = []     # objects that must outlive the call

    def _one(self, obj, writable):
        if _is_tensor(obj):
            if obj.is_cuda:
                if not obj.is_contiguous():
                    raise ValueError("a CUDA tensor must be contiguous")
                n = obj.numel() * obj.element_size()
                _check_inside_storage(obj, obj.data_ptr(), n)
                self.device.append((obj.data_ptr(), n))
                self.keep.append(obj)
                return obj.data_ptr(), n
            return tensor_bytes(obj, writable), None
        if isinstance(obj, int) and not isinstance(obj, bool):
            raise TypeError("give an address with put_from/get_into and its size, not as a value")
        return obj, None

    def add(self, value, writable):
        """value: one buffer-like object, or a list/tuple of them (one
        object from several buffers)."""
        if isinstance(value, (list, tuple)):
            bs, ss = [], []
            for v in value:
                b, s = self._one(v, writable)
                bs.append(b)
                ss.append(s)
            self.bufs.append(bs)
            self.sizes.append(ss if any(s is not None for s in ss) else None)
        else:
            b, s = self._one(value, writable)
            self.bufs.append(b)
            self.sizes.append(s)

    def size_arg(self):
        if all(s is None for s in self.sizes):
            return None
        out = []
        for b, s in zip(self.bufs, self.sizes):
            if isinstance(b, list):
                out.append([x if x is not None else 0 for x in (s or [None] * len(b))])
            else:
                out.append(s if s is not None else 0)
        return out
