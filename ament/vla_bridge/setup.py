"""ament_python packaging of the VLA bridge: what `colcon build` installs for `ros2 launch/run`.

The node's code is vla-server's `ros_bridge` package (installed with pip, with the server it
starts); this package adds the ROS side only: the resource-index marker, package.xml, the
launch file from the repository's `launch/` folder, and the executables in lib/vla_bridge.
"""

import os
from glob import glob

from setuptools import setup

PACKAGE = "vla_bridge"
HERE = os.path.dirname(os.path.abspath(__file__))
REPO_LAUNCH = os.path.join(HERE, "..", "..", "launch")
launch_files = sorted(
    os.path.relpath(path, HERE) for path in glob(os.path.join(REPO_LAUNCH, "*.launch.py"))
)

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=[],
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", launch_files),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    description="ROS 2 bridge to vla-server (camera frames in, streamed actions out)",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "bridge_node = ros_bridge.bridge_node:main",
            "vla_bridge = ros_bridge.cli:main",
        ],
    },
)
