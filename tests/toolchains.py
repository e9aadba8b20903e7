"""External tools for tests: skip (locally) or fail (on CI) when one is missing.

    from toolchains import require_tool
    gcc = require_tool("arm-none-eabi-gcc", "gcc-arm-none-eabi")

On CI (environment variable CI=true) a missing tool is a test failure, so a
broken CI image cannot silently skip the cross-target tests; elsewhere the test
is skipped with a message naming the Debian package to install.
"""
from __future__ import annotations

import os
import shutil

import pytest

# Debian packages of the tools the tests use (for messages and for callers
# that only know the tool name).
DEBIAN_PACKAGES = {
    "arm-none-eabi-gcc": "gcc-arm-none-eabi libnewlib-arm-none-eabi",
    "arm-none-eabi-readelf": "binutils-arm-none-eabi",
    "arm-none-eabi-objdump": "binutils-arm-none-eabi",
    "qemu-system-arm": "qemu-system-arm",
    "qemu-aarch64": "qemu-user",
    "aarch64-linux-gnu-gcc": "gcc-aarch64-linux-gnu",
    "readelf": "binutils",
    "objdump": "binutils",
    "make": "make",
    "cc": "gcc",
    "gcc": "gcc",
    "dot": "graphviz",
    "chromium": "chromium",
}


def on_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() == "true"


def require_tool(name: str, debian_package: str | None = None) -> str:
    """Absolute path of executable `name`; skip or fail the calling test if it is missing."""
    path = shutil.which(name)
    if path:
        return path
    pkg = debian_package or DEBIAN_PACKAGES.get(name, name)
    msg = f"{name} not found on PATH; install the Debian package(s): apt-get install {pkg}"
    if on_ci():
        pytest.fail(f"{msg} (CI=true: missing tools are failures, not skips)", pytrace=False)
    pytest.skip(msg)
    raise AssertionError("unreachable")  # pragma: no cover


def require_tools(*names: str) -> dict:
    """require_tool for several tools (packages from DEBIAN_PACKAGES); returns {name: path}."""
    return {n: require_tool(n) for n in names}
