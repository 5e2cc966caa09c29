"""Command-line tools around the bridge: recording generators and bag utilities."""
