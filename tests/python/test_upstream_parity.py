"""mooncake.store against upstream Mooncake's binding (store_py.cpp, pybind11):
where a caller moving from upstream would see a different answer for the
same call. Each test is a call upstream answers in a way callers rely on:

- an argument of the wrong type (a key that is not str/bytes, a keys list
  given as one str, a value without the buffer protocol, an address or size
  that is not an int of 0 .. 2**64-1, a config that is not a
  ReplicateConfig) is a TypeError raised before anything is sent, as
  pybind11 refuses to convert it; well-typed bad values (ptr 0, size 0, an
  unregistered address, mismatched list lengths) stay negative codes;
- ReplicateConfig takes only its own fields, each of its type, as pybind's
  def_readwrite does: a typo is an AttributeError, not a setting ignored;
- the enums and fields upstream exports exist (ReplicaStatus,
  ObjectDataType, nof/dfs replica counts, data_type);
- setup(config=dict) by keyword.

The deliberate differences are in README.md, "Python".
"""
import numpy as np
import pytest

import mooncake.store as ms
from mooncake.store import MooncakeDistributedStore, ReplicateConfig

INVALID = ms.INVALID_PARAMS


@pytest.fixture
def st(server):
    """A drop-in store without a segment and a registered 64 KiB buffer."""
    s = MooncakeDistributedStore()
    assert s.setup("parity", "P2PHANDSHAKE", 0, 1 << 20, "tcp", "", server.addr) == 0
    buf = np.zeros(1 << 16, np.uint8)
    assert s.register_buffer(buf.ctypes.data, buf.nbytes) == 0
    s.buf, s.ptr = buf, buf.ctypes.data
    yield s
    s.remove_all()
    s.close()


def test_setup_takes_its_dict_by_keyword(server):
    # Upstream's dict overload is setup(config: dict): setup(config={...})
    # was a TypeError here (unexpected keyword argument 'config').
    s = MooncakeDistributedStore()
    assert s.setup(config={"local_hostname": "kw", "metadata_server": "P2PHANDSHAKE",
                           "global_segment_size": 0, "local_buffer_size": "1MB",
                           "master_server_addr": server.addr}) == 0
    assert s.get_hostname() == "kw"
    assert s.put("par:kw", b"v") == 0 and s.get("par:kw") == b"v"
    assert s.remove("par:kw") == 0
    s.close()
    with pytest.raises(TypeError):
        s.setup("h", config={"master_server_addr": server.addr})
    with pytest.raises(TypeError):
        s.setup(config="local_hostname=h")
    assert s.get_hostname() == "kw" and s.health_check() == 1  # neither set it up
