"""Stand-in for the ROS 2 package rcl_interfaces (the parameter messages in `.msg`)."""
