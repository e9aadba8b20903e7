"""A small reader of relocatable ELF objects (32/64-bit, either byte order): sections, the
symbol table and the relocation types. The in-process runtime reads the symbols an object needs
and its relocation types before handing it to LLVM's loader; bundle-info reads each kernel
function's code size (st_size). llvmlite's ObjectFileRef lists sections but not symbols."""
from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass

SHT_SYMTAB, SHT_RELA, SHT_REL = 2, 4, 9
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 0x1, 0x2, 0x4
STT_NAMES = {0: "notype", 1: "object", 2: "func", 3: "section", 4: "file"}
STB_NAMES = {0: "local", 1: "global", 2: "weak"}
MACHINES = {3: "x86", 40: "arm", 62: "x86_64", 183: "aarch64", 243: "riscv"}
# x86-64 relocations that hold an absolute 32-bit address: they need the object loaded in
# the low 2/4 GiB, which an in-process loader does not promise
X86_64_ABS32 = {10: "R_X86_64_32", 11: "R_X86_64_32S"}


class ElfError(ValueError):
    pass


@dataclass(frozen=True)
class Section:
    name: str
    type: int
    flags: int
    offset: int
    size: int
    link: int
    info: int
    entsize: int


@dataclass(frozen=True)
class Symbol:
    name: str
    value: int
    size: int
    type: str  # func, object, notype, section, file
    bind: str  # local, global, weak
    shndx: int  # 0: undefined

    @property
    def defined(self) -> bool:
        return self.shndx != 0


class Elf:
    """The parts of an ELF object glowpy reads. Raises ElfError on anything truncated or
    malformed (a bundle's object is read, never trusted)."""

    def __init__(self, data: bytes):
        if len(data) < 52 or data[:4] != b"\x7fELF" or data[4] not in (1, 2) or data[5] not in (1, 2):
            raise ElfError("not an ELF object")
        self.data = data
        self.bits = 64 if data[4] == 2 else 32
        self.end = "<" if data[5] == 1 else ">"
        self.type, self.machine_id = self._unpack("HH", 16)
        if self.bits == 64:
            shoff, = self._unpack("Q", 0x28)
            shentsize, shnum, shstrndx = self._unpack("HHH", 0x3A)
        else:
            shoff, = self._unpack("I", 0x20)
            shentsize, shnum, shstrndx = self._unpack("HHH", 0x2E)
        fmt = "IIQQQQIIQQ" if self.bits == 64 else "IIIIIIIIII"
        if shentsize < struct.calcsize(self.end + fmt) and shnum:
            raise ElfError("bad section header size")
        raw = []
        for i in range(shnum):
            name, typ, flags, _addr, off, size, link, info, _align, entsize = self._unpack(
                fmt, shoff + i * shentsize)
            raw.append((name, typ, flags, off, size, link, info, entsize))
        if raw and not 0 <= shstrndx < len(raw):
            raise ElfError("bad section name table index")
        names = self._bytes(raw[shstrndx][3], raw[shstrndx][4]) if raw else b""
        self.sections = [Section(_cstr(names, r[0]), *r[1:]) for r in raw]

    @property
    def machine(self) -> str:
        return MACHINES.get(self.machine_id, f"machine {self.machine_id}")

    def _unpack(self, fmt: str, offset: int) -> tuple:
        try:
            return struct.unpack_from(self.end + fmt, self.data, offset)
        except struct.error:
            raise ElfError("truncated") from None

    def _bytes(self, offset: int, size: int) -> bytes:
        if offset < 0 or size < 0 or offset + size > len(self.data):
            raise ElfError("truncated")
        return self.data[offset:offset + size]

    def symbols(self) -> list[Symbol]:
        out = []
        for s in self.sections:
            if s.type != SHT_SYMTAB or not s.entsize:
                continue
            if not 0 <= s.link < len(self.sections):
                raise ElfError("bad string table index")
            strs = self._bytes(self.sections[s.link].offset, self.sections[s.link].size)
            body = self._bytes(s.offset, s.size)
            for i in range(1, s.size // s.entsize):  # entry 0 is the null symbol
                if self.bits == 64:
                    name, info, _other, shndx, value, size = struct.unpack_from(
                        self.end + "IBBHQQ", body, i * s.entsize)
                else:
                    name, value, size, info, _other, shndx = struct.unpack_from(
                        self.end + "IIIBBH", body, i * s.entsize)
                out.append(Symbol(_cstr(strs, name), value, size,
                                  STT_NAMES.get(info & 0xF, str(info & 0xF)),
                                  STB_NAMES.get(info >> 4, str(info >> 4)), shndx))
        return out

    def functions(self) -> dict:
        """{function symbol: code size in bytes} (the entry and every kernel function)."""
        return {s.name: s.size for s in self.symbols() if s.type == "func" and s.defined}

    def undefined(self) -> list[str]:
        """Symbols the object needs from elsewhere (memcpy, memset, ...)."""
        return sorted({s.name for s in self.symbols()
                       if not s.defined and s.bind != "local" and s.name})

    def relocation_types(self) -> Counter:
        """How often each relocation type number occurs."""
        out = Counter()
        for s in self.sections:
            if s.type not in (SHT_RELA, SHT_REL) or not s.entsize:
                continue
            body = self._bytes(s.offset, s.size)
            word = "Q" if self.bits == 64 else "I"
            for i in range(s.size // s.entsize):
                _off, info = struct.unpack_from(self.end + word * 2, body, i * s.entsize)
                out[info & 0xFFFFFFFF if self.bits == 64 else info & 0xFF] += 1
        return out

    def section_bytes(self, flags: int) -> dict:
        """{section name: size} of the allocated sections having all of `flags`."""
        return {s.name: s.size for s in self.sections
                if s.flags & SHF_ALLOC and s.flags & flags == flags and s.size}


def _cstr(table: bytes, offset: int) -> str:
    if not 0 <= offset <= len(table):
        raise ElfError("bad string offset")
    end = table.find(b"\0", offset)
    return table[offset:end if end >= 0 else len(table)].decode("utf-8", "replace")


def read(path: str) -> Elf:
    with open(path, "rb") as f:
        return Elf(f.read())
