"""Stand-in for the ROS 2 package trajectory_msgs (messages in `.msg`)."""
