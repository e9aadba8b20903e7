import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def pytest_configure(config):
    config.addinivalue_line("markers", "memcheck_large: the bundles that take minutes under "
                            "valgrind memcheck (tests/test_memcheck.py); CI runs them as one test")
