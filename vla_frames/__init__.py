"""Camera frames as the server and the ROS bridge both read them: decode, check, hash.

A leaf package: numpy, Pillow and xxhash only, nothing from vla_server or ros_bridge, no torch,
so the robot-side bridge can use it without the server's dependencies.
"""
