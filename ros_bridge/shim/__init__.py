"""An rclpy-compatible stand-in for ROS 2 where ROS 2 is not installed.

`rclpy` holds the API subset the bridge uses; `builtin_interfaces`, `std_msgs`, `sensor_msgs`,
`trajectory_msgs`, `diagnostic_msgs` and `rcl_interfaces` hold message classes with ROS 2's field
names and Python types; `cdr` encodes them as ROS 2 does; `transport` carries them in-process or
over DDS (PyPI `cyclonedds`) with ROS 2's wire conventions. Import it through `ros_bridge.compat`.
"""
