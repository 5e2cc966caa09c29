"""rmw_dds_common: the graph messages DDS-based rmw implementations exchange."""
