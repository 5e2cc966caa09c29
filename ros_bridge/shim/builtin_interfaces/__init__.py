"""Stand-in for the ROS 2 package builtin_interfaces (messages in `.msg`)."""
