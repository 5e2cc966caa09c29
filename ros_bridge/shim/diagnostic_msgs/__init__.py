"""Stand-in for the ROS 2 package diagnostic_msgs (messages in `.msg`)."""
