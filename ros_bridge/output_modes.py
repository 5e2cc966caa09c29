"""The message types the bridge can publish its actions as, by parameter value (ROS-free).

The `output` parameter (bridge_params) chooses one; ros_bridge.action_output builds the messages.
"""

from __future__ import annotations

FLOAT64_MULTIARRAY = "float64_multiarray"  # std_msgs/Float64MultiArray, for forward controllers
JOINT_TRAJECTORY = "joint_trajectory"  # trajectory_msgs/JointTrajectory
OUTPUT_MODES = (FLOAT64_MULTIARRAY, JOINT_TRAJECTORY)
