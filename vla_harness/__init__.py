"""Running and measuring a server from outside it: the `vla-server serve` subprocess launcher
and the benchmarks' summary statistics and plots.

A leaf package: stdlib, numpy, httpx and psutil (matplotlib only when a plot is drawn), nothing
from vla_server or ros_bridge, no torch, so the robot-side bridge can use it.
"""
