"""Stand-in for the ROS 2 package sensor_msgs (messages in `.msg`)."""
