"""resolve-zones: every (topic, network zone) pair resolved on Spark with the lookup core."""
