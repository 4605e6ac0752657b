"""Shared by the tests: the catalogue from the built binary ($DSA_PARITY_BIN), when there is one."""
import os
import shutil
import unittest


def binary():
    b = os.environ.get("DSA_PARITY_BIN")
    if b and os.path.exists(b):
        return b
    return shutil.which("dsa-parity")


def need_binary(test):
    return unittest.skipUnless(binary(), "no dsa-parity binary (set DSA_PARITY_BIN)")(test)
