"""Stand-in for the ROS 2 package std_msgs (messages in `.msg`)."""
