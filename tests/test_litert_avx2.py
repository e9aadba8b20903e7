"""benchmarks/litert_avx2.py (`xnnpack.py --xnnpack-avx2`) reaches cpuinfo's feature flags and
its initialization inside LiteRT through the library's symbol table: both are local symbols, not
exported. LiteRT is not a test dependency, so the lookup is checked on a library built here
with a static array and a static function in it: the addresses it gives are where the loader
put them in this process."""
import ctypes
import os
import subprocess
import sys

import pytest

from glowpy.runtime.harness import find_cc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import litert_avx2  # noqa: E402

SOURCE = """
static unsigned char isa_flags[48] = {1, 1, 0, 1};
static unsigned char *where(void) { return isa_flags; }
unsigned char *(*where_fn(void))(void) { return where; }
unsigned char *flags_at(void) { return isa_flags; }
"""


def test_addresses_of_local_symbols(tmp_path):
    src = tmp_path / "flags.c"
    src.write_text(SOURCE)
    lib = tmp_path / "libglowpy_flags_probe.so"
    subprocess.run([find_cc(), "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", str(lib),
                    str(src)], check=True)
    so = ctypes.CDLL(str(lib))
    so.flags_at.restype = ctypes.c_void_p
    so.where_fn.restype = ctypes.c_void_p
    got = litert_avx2.addresses(lib.name, ("isa_flags", "where"))
    assert got["isa_flags"] == so.flags_at()
    assert got["where"] == so.where_fn()
    # what use() does to cpuinfo's flags: written through the address, seen by the library
    flags = (ctypes.c_ubyte * 48).from_address(got["isa_flags"])
    assert list(flags[:4]) == [1, 1, 0, 1]
    flags[1] = 0
    assert ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_ubyte * 48))(got["where"])().contents[1] == 0


def test_missing_symbol_is_one_error_line(tmp_path):
    src = tmp_path / "empty.c"
    src.write_text("int glowpy_probe_exported(void) { return 1; }\n")
    lib = tmp_path / "libglowpy_empty_probe.so"
    subprocess.run([find_cc(), "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    ctypes.CDLL(str(lib))
    with pytest.raises(SystemExit) as e:
        litert_avx2.addresses(lib.name, ("cpuinfo_isa",))
    said = str(e.value)
    assert said.startswith("error: --xnnpack-avx2: ") and "cpuinfo_isa" in said and "\n" not in said
