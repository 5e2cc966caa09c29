"""Stand-in for the ROS 2 package rcl_interfaces: parameter and log messages (`.msg`) and the
parameter services (`.srv`)."""
