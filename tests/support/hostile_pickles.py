"""Pickles that run code when loaded: what a restricted unpickler must refuse (never run)."""

from __future__ import annotations

import builtins
import os
import subprocess


class SystemCall:
    """Loading it runs `touch MARKER` (os.system): the marker file shows that it ran."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class EvalCall:
    """Loading it evaluates an expression (builtins.eval)."""

    def __reduce__(self):
        return (builtins.eval, ("__import__('os').getpid()",))


class PopenCall:
    """Loading it starts a process (a class outside any allow-list)."""

    def __reduce__(self):
        return (subprocess.Popen, (["true"],))
