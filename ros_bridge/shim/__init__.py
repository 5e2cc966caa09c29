"""An rclpy-compatible stand-in for ROS 2 where ROS 2 is not installed.

`rclpy` holds the API subset the bridge uses; `builtin_interfaces`, `std_msgs`, `sensor_msgs`,
`trajectory_msgs`, `diagnostic_msgs`, `rcl_interfaces` (messages and the parameter services) and
`rmw_dds_common` hold interface classes with ROS 2's field names and Python types; `cdr` encodes
them as ROS 2 does; `transport` carries them in-process or over DDS (PyPI `cyclonedds`) with ROS
2's wire conventions, services framed as rmw_cyclonedds frames them (`service_wire`); `graph`,
`rosout` and `parameter_services` are what rcl adds to every node (its place in the ROS graph,
/rosout, the parameter services). Import it through `ros_bridge.compat`.
"""
